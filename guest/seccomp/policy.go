//go:build linux

package seccomp

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// Op compares one system call argument.
type Op int

const (
	// Eq holds when the argument equals Value (all 64 bits).
	Eq Op = iota + 1
	// MaskedEq holds when argument&Mask equals Value. Masks keep the
	// comparison to the bits the kernel reads: it truncates an int
	// argument to 32 bits, so a check on all 64 could be dodged by
	// setting the high half.
	MaskedEq
)

// Cond is one condition on an argument.
type Cond struct {
	Arg   uint // 0–5
	Op    Op
	Value uint64
	Mask  uint64 // MaskedEq only
}

// Rule allows one system call, or answers it with Errno. Several rules
// for one call are alternatives; the conditions of one rule must all hold.
type Rule struct {
	Name   string // as libseccomp spells it
	Reason string
	When   []Cond
	Errno  syscall.Errno // 0: allow
}

// The default answer to a call that no rule allows.
const DefaultErrno = unix.EPERM

// LastKnownCall is the highest system call number the policy was written
// against: Linux 6.1's set_mempolicy_home_node, the guest kernel's last
// call. Since Linux 5.1 a new call has the same number on every
// architecture, so this holds for amd64 and arm64 alike. A call above it
// is newer than the policy and did not get a decision: it fails with
// ENOSYS, as it would on a kernel that lacks it, so that a C library that
// tries a new call first falls back to an old one (glibc 2.41 tries
// fchmodat2, 452, and falls back to fchmodat only on ENOSYS). Calls up to
// it that no rule allows keep DefaultErrno.
const LastKnownCall = 450

// cloneNew are the clone flags that make new namespaces. CLONE_NEWTIME
// is left out: in clone(2) its bit is part of the exit signal, and time
// namespaces can only be made by unshare and clone3, both refused.
const cloneNew = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

const low32 = 0xffff_ffff

func allow(name, reason string) Rule { return Rule{Name: name, Reason: reason} }

// Policy is the box's allow-list. Calls missing on an architecture (open,
// fork, ... on arm64) are skipped there. Left out on purpose, and so
// refused: mount, umount2, pivot_root, chroot, unshare, setns, ptrace,
// process_vm_readv/writev, kcmp, pidfd_getfd, bpf, perf_event_open,
// userfaultfd, io_uring_*, io_setup and the other AIO calls, keyctl,
// add_key, request_key, init_module, finit_module, delete_module,
// kexec_load, kexec_file_load, reboot, swapon, swapoff, syslog, acct,
// quotactl, name_to_handle_at, open_by_handle_at, the new mount API
// (fsopen, fsmount, move_mount, open_tree, ...), setuid and the other
// credential setters, sethostname, clock_settime, settimeofday,
// adjtimex, personality, modify_ldt, iopl, ioperm, vmsplice, mbind and
// the other NUMA calls, seccomp, landlock_*, execveat.
var Policy = []Rule{
	// Files
	allow("read", "read files and pipes"),
	allow("write", "write files and pipes"),
	allow("readv", "scatter read"),
	allow("writev", "gather write (glibc stdio)"),
	allow("pread64", "read at an offset (zipimport, sqlite)"),
	allow("pwrite64", "write at an offset (sqlite)"),
	allow("preadv", "read at an offset"),
	allow("pwritev", "write at an offset"),
	allow("preadv2", "read at an offset (os.preadv)"),
	allow("pwritev2", "write at an offset (os.pwritev)"),
	allow("open", "open a file (amd64)"),
	allow("openat", "open a file"),
	allow("openat2", "open a file with resolve flags"),
	allow("creat", "create a file (amd64)"),
	allow("close", "close a descriptor"),
	allow("close_range", "close many descriptors (subprocess)"),
	allow("lseek", "seek"),
	allow("stat", "stat (amd64)"),
	allow("lstat", "stat without following a link (amd64)"),
	allow("fstat", "stat an open file"),
	allow("newfstatat", "stat relative to a directory (os.stat)"),
	allow("statx", "extended stat"),
	allow("statfs", "filesystem stats (glibc, shutil.disk_usage)"),
	allow("fstatfs", "filesystem stats of an open file"),
	allow("access", "check access (amd64)"),
	allow("faccessat", "check access"),
	allow("faccessat2", "check access; glibc tries it first and does not fall back from EPERM"),
	allow("readlink", "read a link (amd64)"),
	allow("readlinkat", "read a link"),
	allow("getdents", "list a directory (amd64)"),
	allow("getdents64", "list a directory"),
	allow("getcwd", "current directory"),
	allow("chdir", "change directory"),
	allow("fchdir", "change directory by descriptor"),
	allow("mkdir", "make a directory (amd64)"),
	allow("mkdirat", "make a directory"),
	allow("rmdir", "remove a directory (amd64)"),
	allow("unlink", "remove a file (amd64)"),
	allow("unlinkat", "remove a file"),
	allow("rename", "rename (amd64)"),
	allow("renameat", "rename"),
	allow("renameat2", "rename with flags"),
	allow("link", "hard link (amd64)"),
	allow("linkat", "hard link"),
	allow("symlink", "symbolic link (amd64)"),
	allow("symlinkat", "symbolic link"),
	allow("chmod", "change mode (amd64); setuid bits are inert under nosuid and no_new_privs"),
	allow("fchmod", "change mode"),
	allow("fchmodat", "change mode"),
	allow("chown", "change owner (amd64); the kernel allows only what the uid may do"),
	allow("fchown", "change owner"),
	allow("lchown", "change owner of a link (amd64)"),
	allow("fchownat", "change owner"),
	allow("truncate", "truncate"),
	allow("ftruncate", "truncate an open file"),
	allow("fallocate", "reserve space (posix_fallocate)"),
	allow("fsync", "flush a file"),
	allow("fdatasync", "flush a file's data"),
	allow("utime", "set times (amd64)"),
	allow("utimes", "set times (amd64)"),
	allow("futimesat", "set times (amd64)"),
	allow("utimensat", "set times (os.utime, shutil.copystat)"),
	allow("umask", "file mode mask"),
	allow("flock", "advisory lock"),
	allow("fcntl", "descriptor flags and locks"),
	allow("dup", "duplicate a descriptor"),
	allow("dup2", "duplicate a descriptor (amd64)"),
	allow("dup3", "duplicate a descriptor"),
	allow("pipe", "pipe (amd64)"),
	allow("pipe2", "pipe"),
	allow("sendfile", "copy between descriptors (shutil.copyfile)"),
	allow("copy_file_range", "copy between files"),
	allow("splice", "move data through a pipe"),
	allow("tee", "duplicate pipe data"),
	allow("fadvise64", "access pattern hint"),
	allow("readahead", "read-ahead hint"),
	allow("getxattr", "read extended attributes (shutil.copy2)"),
	allow("lgetxattr", "read extended attributes"),
	allow("fgetxattr", "read extended attributes"),
	allow("listxattr", "list extended attributes (shutil.copy2 raises on EPERM)"),
	allow("llistxattr", "list extended attributes"),
	allow("flistxattr", "list extended attributes"),
	allow("inotify_init", "file change notification (amd64)"),
	allow("inotify_init1", "file change notification"),
	allow("inotify_add_watch", "file change notification"),
	allow("inotify_rm_watch", "file change notification"),
	// A FIFO (os.mkfifo) or an empty regular file; never a device node.
	{Name: "mknod", Reason: "make a FIFO (amd64)", When: []Cond{{Arg: 1, Op: MaskedEq, Mask: unix.S_IFMT, Value: unix.S_IFIFO}}},
	{Name: "mknod", Reason: "make a regular file (amd64)", When: []Cond{{Arg: 1, Op: MaskedEq, Mask: unix.S_IFMT, Value: unix.S_IFREG}}},
	{Name: "mknod", Reason: "make a regular file (amd64)", When: []Cond{{Arg: 1, Op: MaskedEq, Mask: unix.S_IFMT, Value: 0}}},
	{Name: "mknodat", Reason: "make a FIFO (os.mkfifo)", When: []Cond{{Arg: 2, Op: MaskedEq, Mask: unix.S_IFMT, Value: unix.S_IFIFO}}},
	{Name: "mknodat", Reason: "make a regular file", When: []Cond{{Arg: 2, Op: MaskedEq, Mask: unix.S_IFMT, Value: unix.S_IFREG}}},
	{Name: "mknodat", Reason: "make a regular file", When: []Cond{{Arg: 2, Op: MaskedEq, Mask: unix.S_IFMT, Value: 0}}},

	// ioctl: a list of commands, so TIOCSTI (pushing characters into a
	// terminal's input, the classic escape through a shared tty) and
	// every other driver command are refused. The kernel reads the
	// command as 32 bits, so only those are compared: TIOCSTI with a bit
	// set above them is still TIOCSTI to the kernel.
	ioctlRule(unix.TCGETS, "TCGETS: isatty, termios"),
	ioctlRule(unix.TIOCGWINSZ, "TIOCGWINSZ: os.get_terminal_size"),
	ioctlRule(unix.TIOCGPGRP, "TIOCGPGRP: os.tcgetpgrp"),
	ioctlRule(unix.TIOCOUTQ, "TIOCOUTQ/SIOCOUTQ: bytes queued to send"),
	ioctlRule(fionread, "FIONREAD: bytes ready to read"),
	ioctlRule(fionbio, "FIONBIO: socket.setblocking, os.set_blocking"),
	ioctlRule(fionclex, "FIONCLEX: os.set_inheritable (raises on EPERM)"),
	ioctlRule(fioclex, "FIOCLEX: os.set_inheritable (raises on EPERM)"),
	ioctlRule(fioasync, "FIOASYNC: signal-driven I/O"),
	ioctlRule(unix.SIOCGIFNAME, "SIOCGIFNAME: socket.if_indextoname"),
	ioctlRule(unix.SIOCGIFCONF, "SIOCGIFCONF: list interfaces (loopback only)"),
	ioctlRule(unix.SIOCGIFFLAGS, "SIOCGIFFLAGS: interface flags"),
	ioctlRule(unix.SIOCGIFINDEX, "SIOCGIFINDEX: socket.if_nametoindex"),
	ioctlRule(unix.SIOCGIFMTU, "SIOCGIFMTU: interface MTU"),

	// Memory
	allow("brk", "heap"),
	allow("mmap", "map memory and files"),
	allow("munmap", "unmap memory"),
	allow("mremap", "grow a mapping (realloc)"),
	allow("mprotect", "change protection (ld.so, libffi)"),
	allow("madvise", "memory hints (malloc trim)"),
	allow("mincore", "page residency"),
	allow("msync", "flush a file mapping (mmap.flush)"),
	allow("membarrier", "memory barrier across threads"),
	allow("memfd_create", "anonymous file (libffi closures, multiprocessing)"),

	// Processes and threads
	{Name: "clone", Reason: "threads and fork, but no new namespaces",
		When: []Cond{{Arg: 0, Op: MaskedEq, Mask: cloneNew, Value: 0}}},
	{Name: "clone3", Reason: "its flags are behind a pointer the filter cannot read; ENOSYS makes glibc fall back to clone", Errno: unix.ENOSYS},
	allow("fork", "fork (amd64)"),
	allow("vfork", "vfork (amd64; subprocess)"),
	allow("execve", "run a program (subprocess); no_new_privs holds"),
	allow("exit", "end a thread"),
	allow("exit_group", "end the process"),
	allow("wait4", "wait for a child"),
	allow("waitid", "wait for a child"),
	allow("kill", "signal a process in the box"),
	allow("tkill", "signal a thread"),
	allow("tgkill", "signal a thread"),
	allow("pidfd_open", "process handle for a child (asyncio)"),
	allow("pidfd_send_signal", "signal through a process handle"),
	allow("rt_sigaction", "signal handlers"),
	allow("rt_sigprocmask", "signal mask"),
	allow("rt_sigreturn", "return from a signal handler"),
	allow("rt_sigpending", "pending signals"),
	allow("rt_sigsuspend", "wait for a signal"),
	allow("rt_sigtimedwait", "wait for a signal (signal.sigtimedwait)"),
	allow("rt_sigqueueinfo", "queue a signal"),
	allow("rt_tgsigqueueinfo", "queue a signal to a thread"),
	allow("sigaltstack", "signal stack (faulthandler)"),
	allow("restart_syscall", "restart after a signal"),
	allow("pause", "wait for a signal (amd64)"),
	allow("signalfd", "signals as a descriptor (amd64)"),
	allow("signalfd4", "signals as a descriptor"),
	allow("getpid", "own pid"),
	allow("getppid", "parent pid"),
	allow("gettid", "thread id"),
	allow("getuid", "own uid"),
	allow("geteuid", "own uid"),
	allow("getgid", "own gid"),
	allow("getegid", "own gid"),
	allow("getresuid", "own uids"),
	allow("getresgid", "own gids"),
	allow("getgroups", "own groups"),
	allow("getpgid", "process group"),
	allow("getpgrp", "process group (amd64)"),
	allow("setpgid", "process group (subprocess process_group)"),
	allow("getsid", "session"),
	allow("setsid", "new session (subprocess start_new_session)"),
	allow("capget", "read capabilities (all zero)"),
	allow("prctl", "thread names and process flags; PR_SET_MM_MAP edits only the caller's own memory-map bookkeeping (a warm box's command line), the other options that matter need capabilities the box lacks"),
	allow("arch_prctl", "thread pointer (amd64 TLS setup)"),
	allow("set_tid_address", "thread start-up (glibc)"),
	allow("set_robust_list", "thread start-up (glibc)"),
	allow("rseq", "restartable sequences (glibc registers one per thread)"),
	allow("futex", "locks and thread joins"),
	allow("futex_waitv", "wait on several futexes"),
	allow("sched_yield", "yield the CPU"),
	allow("sched_getaffinity", "CPU count (os.sched_getaffinity, OpenBLAS)"),
	allow("sched_setaffinity", "pin a thread (OpenBLAS); only CPUs the box has"),
	allow("sched_getparam", "scheduling parameters"),
	allow("sched_getscheduler", "scheduling policy"),
	allow("sched_get_priority_max", "scheduling limits"),
	allow("sched_get_priority_min", "scheduling limits"),
	allow("getpriority", "nice value"),
	allow("setpriority", "lower own priority (os.nice)"),
	allow("getrlimit", "resource limits"),
	allow("setrlimit", "lower resource limits"),
	allow("prlimit64", "resource limits (resource module)"),
	allow("getrusage", "resource use"),
	allow("times", "process times"),
	allow("getcpu", "current CPU"),

	// Time
	allow("nanosleep", "sleep"),
	allow("clock_nanosleep", "sleep (time.sleep)"),
	allow("clock_gettime", "clock (when the vDSO is not used)"),
	allow("clock_getres", "clock resolution"),
	allow("gettimeofday", "clock"),
	allow("time", "clock (amd64)"),
	allow("alarm", "alarm signal (amd64)"),
	allow("getitimer", "interval timer"),
	allow("setitimer", "interval timer (signal.setitimer)"),
	allow("timer_create", "POSIX timer"),
	allow("timer_settime", "POSIX timer"),
	allow("timer_gettime", "POSIX timer"),
	allow("timer_getoverrun", "POSIX timer"),
	allow("timer_delete", "POSIX timer"),
	allow("timerfd_create", "timer descriptor"),
	allow("timerfd_settime", "timer descriptor"),
	allow("timerfd_gettime", "timer descriptor"),

	// Waiting on descriptors
	allow("poll", "wait on descriptors (amd64)"),
	allow("ppoll", "wait on descriptors"),
	allow("select", "wait on descriptors (amd64)"),
	allow("pselect6", "wait on descriptors"),
	allow("epoll_create", "event loop (amd64)"),
	allow("epoll_create1", "event loop (asyncio, selectors)"),
	allow("epoll_ctl", "event loop"),
	allow("epoll_wait", "event loop (amd64)"),
	allow("epoll_pwait", "event loop"),
	allow("epoll_pwait2", "event loop"),
	allow("eventfd", "event descriptor (amd64)"),
	allow("eventfd2", "event descriptor"),

	// Sockets: unix and inet only. The box's network namespace has only
	// loopback; vsock is not namespaced and would reach the host, and
	// netlink, packet, alg and the rare families (which could autoload
	// code) are refused outright. Raw sockets are refused by type.
	sockRule(unix.AF_UNIX, unix.SOCK_STREAM), sockRule(unix.AF_UNIX, unix.SOCK_DGRAM), sockRule(unix.AF_UNIX, unix.SOCK_SEQPACKET),
	sockRule(unix.AF_INET, unix.SOCK_STREAM), sockRule(unix.AF_INET, unix.SOCK_DGRAM),
	sockRule(unix.AF_INET6, unix.SOCK_STREAM), sockRule(unix.AF_INET6, unix.SOCK_DGRAM),
	{Name: "socketpair", Reason: "connected unix sockets (multiprocessing)",
		When: []Cond{{Arg: 0, Op: MaskedEq, Mask: low32, Value: unix.AF_UNIX}}},
	allow("bind", "bind a socket"),
	allow("listen", "listen"),
	allow("accept", "accept"),
	allow("accept4", "accept"),
	allow("connect", "connect"),
	allow("getsockname", "socket address"),
	allow("getpeername", "peer address"),
	allow("sendto", "send"),
	allow("recvfrom", "receive"),
	allow("sendmsg", "send (descriptor passing in multiprocessing)"),
	allow("recvmsg", "receive"),
	allow("sendmmsg", "send several"),
	allow("recvmmsg", "receive several"),
	allow("shutdown", "shut a socket"),
	allow("setsockopt", "socket options"),
	allow("getsockopt", "socket options"),

	// System V IPC: private to the box's IPC namespace.
	allow("shmget", "System V shared memory"),
	allow("shmat", "System V shared memory"),
	allow("shmdt", "System V shared memory"),
	allow("shmctl", "System V shared memory"),
	allow("semget", "System V semaphores"),
	allow("semop", "System V semaphores"),
	allow("semtimedop", "System V semaphores"),
	allow("semctl", "System V semaphores"),
	allow("msgget", "System V messages"),
	allow("msgsnd", "System V messages"),
	allow("msgrcv", "System V messages"),
	allow("msgctl", "System V messages"),

	// The machine
	allow("uname", "kernel name (platform)"),
	allow("sysinfo", "memory size (sysconf)"),
	allow("getrandom", "random bytes (os.urandom, hash seeds)"),
}

// ioctl commands x/sys/unix does not name; asm-generic values, the same
// on amd64 and arm64.
const (
	fionread = 0x541b
	fionbio  = 0x5421
	fionclex = 0x5450
	fioclex  = 0x5451
	fioasync = 0x5452
)

// ioctlRule allows one ioctl command, compared on its 32 bits.
func ioctlRule(cmd uint64, reason string) Rule {
	return Rule{Name: "ioctl", Reason: reason, When: []Cond{{Arg: 1, Op: MaskedEq, Mask: low32, Value: cmd}}}
}

// sockRule allows one socket family and type. Both are compared on the
// 32 bits the kernel reads; the type's flag bits (SOCK_NONBLOCK,
// SOCK_CLOEXEC) are masked off.
func sockRule(family, typ int) Rule {
	return Rule{
		Name:   "socket",
		Reason: "unix and inet sockets (loopback only in the box)",
		When: []Cond{
			{Arg: 0, Op: MaskedEq, Mask: low32, Value: uint64(family)},
			{Arg: 1, Op: MaskedEq, Mask: 0xf, Value: uint64(typ)},
		},
	}
}
