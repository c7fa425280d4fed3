//! Table-driven tests over the fixture trees in agent/fixtures/sysfs.
