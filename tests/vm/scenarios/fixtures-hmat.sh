# Captures the HMAT shape's sysfs and tracefs formats as parser fixtures.
. /tests/capture.sh
finish
