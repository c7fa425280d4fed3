"""Prints `NAME run_time_ns run_cnt` of every loaded BPF program whose name is given (or all),
through the bpf syscall (BPF_PROG_GET_NEXT_ID, BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD),
so it works where bpftool is not installed. Counts grow only while kernel.bpf_stats_enabled=1."""
import ctypes
import os
import struct
import sys

NR_BPF = 321  # x86-64
libc = ctypes.CDLL(None, use_errno=True)
BPF_PROG_GET_NEXT_ID, BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD = 11, 13, 15
INFO_LEN = 256  # struct bpf_prog_info: name at 64, run_time_ns at 192, run_cnt at 200


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(NR_BPF, cmd, buf, 128)
    return r, buf.raw


def programs():
    pid = 0
    while True:
        r, out = bpf(BPF_PROG_GET_NEXT_ID, struct.pack("II", pid, 0))
        if r != 0:
            return
        pid = struct.unpack_from("I", out, 4)[0]
        fd, _ = bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", pid))
        if fd < 0:
            continue
        info = ctypes.create_string_buffer(INFO_LEN)
        attr = struct.pack("IIQ", fd, INFO_LEN, ctypes.addressof(info))
        r, _ = bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
        os.close(fd)
        if r != 0:
            continue
        raw = info.raw
        name = raw[64:80].split(b"\0")[0].decode()
        run_ns, run_cnt = struct.unpack_from("QQ", raw, 192)
        yield pid, name, run_ns, run_cnt


if __name__ == "__main__":
    want = set(sys.argv[1:])
    for pid, name, ns, cnt in programs():
        if not want or name in want:
            print(name, ns, cnt)
