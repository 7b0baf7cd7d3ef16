# The waiter: what a warm box's python3 runs (as `python3 -I -B -c WAITER`)
# before its program arrives. It imports the image's preload list, saying
# which module it imports (up to the next module, when the program comes
# before the list is done), says it is ready, takes the program and its stdout and stderr from the agent over
# fd 0 (a unix seqpacket socket, the only channel there is), reports its
# descriptors, replaces fd 0 with /dev/null on the agent's "go", and runs
# the program as `python3 -I -B -c CODE` would: in a fresh __main__, with
# tracebacks that start at the program, its exit status for the process,
# and what the interpreter does at exit.
#
# It keeps to the modules every interpreter has loaded at start (sys, os),
# and _socket for the descriptors, so that what a program finds in
# sys.modules is what a cold box has plus the preload list.
_main_base = dict(globals())


def _pybox_wait():
    import sys, os
    import _socket

    ctl = _socket.socket(fileno=0)

    def say(line):
        ctl.send(line.encode() + b"\n")

    preloaded = []
    try:
        with open("/usr/share/pybox/preload") as f:
            wanted = [m.strip() for m in f if m.strip() and not m.startswith("#")]
    except FileNotFoundError:
        wanted = []
    for name in wanted:
        # A program that came while the preload goes on is not kept
        # waiting for the rest: it runs with what is imported so far.
        try:
            ctl.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
            break
        except BlockingIOError:
            pass
        say("importing " + name)
        try:
            __import__(name)
        except BaseException as e:
            say("fail %s: %s: %s" % (name, type(e).__name__, e))
            os._exit(3)
        preloaded.append(name)
    sys.stdout.flush()
    sys.stderr.flush()
    say("ready " + " ".join(preloaded))

    # The program's code, with its stdout and stderr.
    fd_size = 4
    msg, anc, _, _ = ctl.recvmsg(1 << 20, _socket.CMSG_SPACE(2 * fd_size))
    fds = []
    for level, kind, data in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i:i + fd_size], sys.byteorder) for i in range(0, len(data) - fd_size + 1, fd_size)]
    if len(fds) != 2 or not msg:
        say("fail the hand-over brought %d descriptors and %d bytes" % (len(fds), len(msg)))
        os._exit(3)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    os.close(fds[0])
    os.close(fds[1])

    # Whatever is open now besides 0-2 would reach the program.
    open_fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            os.fstat(fd)
        except OSError:
            continue  # the directory listdir had open
        open_fds.append(fd)
    say("fds " + ",".join(str(fd) for fd in sorted(open_fds)))
    if ctl.recv(16) != b"go":
        os._exit(3)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)  # the socket's last descriptor: the channel is gone
    os.close(null)
    ctl.detach()
    if "_socket" not in preloaded and not any(m == "socket" or m.startswith("socket.") for m in sys.modules):
        del sys.modules["_socket"]
    return msg.decode()


def _pybox_run(code):
    import sys

    main = type(sys)("__main__")
    main.__dict__.update(_main_base)
    sys.modules["__main__"] = main
    sys.orig_argv[-1] = code
    sigint = False
    try:
        compiled = compile(code, "<string>", "exec")
        # Python 3.13 shows the source lines of -c code in tracebacks: it
        # registers the code with linecache under "<string>", as it did
        # the waiter's own, whose module code has the same key as the
        # program's. Register the program's over it, as the interpreter
        # would have. (3.11 has no such registry and shows no lines.)
        linecache = sys.modules.get("linecache")
        if hasattr(linecache, "_register_code"):
            linecache._register_code(compiled, code, "<string>")
        exec(compiled, main.__dict__)
        status = 0
    except SystemExit as e:
        status = _pybox_exit_status(e)
    except BaseException as e:
        # As the interpreter would print it: from the program's frame on.
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e = e.with_traceback(tb)
        sys.last_exc, sys.last_type, sys.last_value, sys.last_traceback = e, type(e), e, tb
        sys.excepthook(type(e), e, tb)
        # The interpreter ends a program stopped by SIGINT with SIGINT.
        sigint = isinstance(e, KeyboardInterrupt)
        status = 1
        del e, tb
    _pybox_end(main, status, sigint)


def _pybox_exit_status(e):
    # The exit status of an uncaught SystemExit, and its message on
    # stderr, as the interpreter gives them.
    import sys

    code = getattr(e, "code", e)
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 255
    try:
        sys.stderr.write(str(code))
        sys.stderr.write("\n")
    except BaseException:
        raise e  # the interpreter's own way, whatever it prints
    return 1


def _pybox_end(main, status, sigint):
    # What the interpreter does at exit that a program can see, in its
    # order: wait for the program's threads, run its atexit handlers,
    # flush sys.stdout and sys.stderr, finalise what the program left in
    # __main__ (its __del__ methods, its unclosed files) and its cyclic
    # garbage. Then the process ends without taking the preloaded modules
    # apart object by object: that teardown is what a program cannot see,
    # and under emulation it costs half a second after numpy and pandas.
    # Anything unusual (a stream that cannot be flushed) goes to the
    # interpreter's own finalisation, as a cold box would.
    import sys, os

    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit

    atexit._run_exitfuncs()
    if not _pybox_flushed(sys.stdout, sys.stderr) and not sigint:
        raise SystemExit(status)
    d = main.__dict__
    for name in [n for n in d if n[:1] == "_" and n[1:2] != "_"] + [n for n in d if n != "__builtins__"]:
        d[name] = None
    del d
    import gc

    gc.collect()
    if not _pybox_flushed(sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) and not sigint:
        raise SystemExit(status)
    if sigint:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _pybox_flushed(*streams):
    for f in streams:
        try:
            if f is not None and not f.closed:
                f.flush()
        except BaseException:
            return False
    return True


_pybox_run(_pybox_wait())
