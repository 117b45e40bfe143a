"""The seccomp filter of the isolated modes, compiled by libseccomp (when installed) into the raw
BPF program that bwrap --seccomp and PR_SET_SECCOMP take: it refuses with EPERM the kernel
interfaces a judged program never needs."""
from __future__ import annotations

import ctypes
import os
import tempfile

# Refused with EPERM: nothing a judged program needs, each a way to reach other processes, the
# kernel's larger attack surface, or out of the namespaces.
_SECCOMP_DENY = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "name_to_handle_at",
    "open_by_handle_at", "lookup_dcookie", "vhangup", "iopl", "ioperm", "uselib",
)
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7


def _scmp_errno(err: int) -> int:
    return 0x00050000 | (err & 0xFFFF)


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def build_seccomp() -> bytes | None:
    """The filter as a raw BPF program (what bwrap --seccomp and PR_SET_SECCOMP take), compiled by
    libseccomp for this machine's architecture; None without libseccomp."""
    import ctypes.util

    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        found = ctypes.util.find_library("seccomp")
        try:
            lib = ctypes.CDLL(found) if found else None
        except OSError:
            lib = None
    if lib is None:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ScmpArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)  # other architectures' syscalls: libseccomp kills
    if not ctx:
        return None
    try:
        def add(name: str, action: int, *cmp: _ScmpArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a syscall on this architecture
                return
            args = (_ScmpArgCmp * len(cmp))(*cmp) if cmp else None
            if lib.seccomp_rule_add_array(ctx, action, nr, len(cmp), args) != 0:
                raise OSError(f"seccomp rule for {name}")

        for name in _SECCOMP_DENY:
            add(name, _scmp_errno(1))
        add("clone3", _scmp_errno(38))  # ENOSYS: its flags sit in memory a filter cannot read
        if os.uname().machine in ("x86_64", "aarch64"):  # where clone's flags are argument 0
            for flag in _CLONE_NS_FLAGS:
                add("clone", _scmp_errno(1), _ScmpArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        with tempfile.TemporaryFile() as f:
            if lib.seccomp_export_bpf(ctx, f.fileno()) != 0:
                return None
            f.seek(0)
            return f.read() or None
    except OSError:
        return None
    finally:
        lib.seccomp_release(ctx)
