package taskinit

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Unix sockets. A network namespace keeps a command away from the host's
// TCP ports, and Landlock's network rules do the same without one, but
// neither governs a unix socket named by a path: the host's PostgreSQL
// listens on one in /var/run/postgresql, and so do many daemons, whose
// sockets accept anyone who may write the file (most are world-writable).
// BlockUnixSockets installs a seccomp filter on the calling thread, which
// what it starts inherits, under which socket(2) of the unix family fails
// with EACCES. A connected pair (socketpair(2)), which programs use to talk
// to their own children, still works: it names nothing outside.
//
// The filter also refuses io_uring_setup(2) (ENOSYS, so that programs fall
// back to ordinary system calls): a ring's socket operation would make a
// socket without the socket(2) the filter sees. And it refuses every system
// call of another ABI than the program's own (32-bit calls on a 64-bit
// kernel, x32 on x86-64), which would reach socket(2) through numbers the
// filter does not check.

// seccompArch are the audit architectures of the supported GOARCHes.
var seccompArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}

// x32Bit marks x32 system call numbers on x86-64.
const x32Bit = 0x40000000

// Offsets in struct seccomp_data.
const (
	seccompNR     = 0
	seccompArchAt = 4
	seccompArg0   = 16 // the low half of the first argument (little-endian)
)

// UnixSocketFilter reports whether BlockUnixSockets works on this
// architecture.
func UnixSocketFilter() bool {
	_, ok := seccompArch[runtime.GOARCH]
	return ok
}

// unixSocketProgram is the filter's program.
func unixSocketProgram() ([]unix.SockFilter, error) {
	arch, ok := seccompArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		deny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
		nosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	return []unix.SockFilter{
		/* 0 */ stmt(ld, seccompArchAt),
		/* 1 */ jump(jeq, arch, 1, 0),
		/* 2 */ stmt(ret, nosys), // another ABI
		/* 3 */ stmt(ld, seccompNR),
		/* 4 */ jump(jge, x32Bit, 0, 1),
		/* 5 */ stmt(ret, nosys), // x32
		/* 6 */ jump(jeq, uint32(unix.SYS_IO_URING_SETUP), 0, 1),
		/* 7 */ stmt(ret, nosys),
		/* 8 */ jump(jeq, uint32(unix.SYS_SOCKET), 0, 3),
		/* 9 */ stmt(ld, seccompArg0),
		/* 10 */ jump(jeq, unix.AF_UNIX, 0, 1),
		/* 11 */ stmt(ret, deny),
		/* 12 */ stmt(ret, unix.SECCOMP_RET_ALLOW),
	}, nil
}

// BlockUnixSockets installs the filter on the calling thread (which must
// be locked to its goroutine and have no new privileges set): neither it
// nor what it starts can make a unix socket.
func BlockUnixSockets() error {
	prog, err := unixSocketProgram()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// prctl, not seccomp(2) with SECCOMP_FILTER_FLAG_TSYNC: the filter is
	// the calling thread's alone.
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		if errors.Is(err, unix.EACCES) {
			return fmt.Errorf("seccomp filter: %w (no new privileges must be set first)", err)
		}
		return fmt.Errorf("seccomp filter: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}
