//go:build ignore

// pybox-launch: how a warm box's python3 waits for its program and then
// runs it exactly as `python3 -I -B -c CODE` would.
//
// The image builder compiles this file against the image's own Python
// headers (internal ones included) into LAUNCHER_PATH (see launcher.go),
// and the agent starts a warm box's python3 with it in LD_PRELOAD. It
// takes the place of python3's main(): it starts the interpreter from the
// same command line a cold box has (with a stand-in for the code), imports
// the image's preload list, and waits on fd 3, a unix seqpacket socket
// whose other end the agent holds. When the program comes it puts the
// process back into the state a fresh interpreter is in at that point and
// hands over to CPython's own Py_RunMain(), which runs the code as -c does
// (in __main__, file name "<string>", audit event cpython.run_command)
// and ends the process as python3 does (thread joins, atexit, flushing,
// finalisation, the exit status, SIGINT for an unhandled
// KeyboardInterrupt). No Python frame of the launcher's is under the
// program's, and nothing of it is left in Python's objects.
//
// What a fresh interpreter has at that point, and what is put back:
//   - its command line: /proc/self/cmdline and /proc/self/environ are
//     pointed at "python3 -I -B -c CODE" and the environment without
//     LD_PRELOAD (prctl PR_SET_MM_MAP); sys.orig_argv says CODE;
//   - the garbage collector's counts and statistics as they were before
//     the preload, its own objects in their generations, and what the
//     preload made frozen (freeze_preload);
//   - the warnings filters, once-registry and default action as they were
//     before the preload, except for what the preloaded modules the
//     program itself imports set at their import (the agent says how
//     many modules of the list that covers, in "go N").
// What cannot be put back is documented: the preloaded modules are in
// sys.modules with their import done (and whatever they hold or
// registered), and the process's own CPU clock and resource counters
// include the preload.
//
// The conversation on fd 3, one message each:
//   launcher: "initialized"            the interpreter is up
//   agent:    "preload"                go on (the agent has read the box's
//                                      memory before the preload)
//   launcher: "importing MODULE"       before each module of the list
//             "fail REASON"            and exits 3
//             "ready MODULE..."        what was imported
//   agent:    "run\n" CODE + SCM_RIGHTS(stdout, stderr)
//                                      (may come during the preload: the
//                                      launcher stops at the next module)
//   launcher: "fds 0,1,2"              the descriptors the program would
//                                      inherit, besides fd 3
//   agent:    "go N"                   fd 3 is closed; the program runs
// Anything else, or the socket's end, makes the launcher exit 3 before any
// of the program has run.

#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE_MODULE 1
#include <Python.h>
#include "internal/pycore_interp.h" /* interp->config, ->gc, ->warnings */

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/prctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "pybox-launch knows the internals of Python 3.11 to 3.13 only"
#endif

enum {
	CTL = 3,                 /* the agent's socket */
	MAX_CODE = 65536,        /* the product's limit on code, in bytes */
	MAX_LIST = 64 << 10,     /* the preload list file */
	MAX_SAY = (64 << 10) + 16,/* one message to the agent */
};

/* The image's preload list (a test compiles in another). */
#ifndef PRELOAD_FILE
#define PRELOAD_FILE "/usr/share/pybox/preload"
#endif
static const char preload_file[] = PRELOAD_FILE;
static const char ld_preload[] = "LD_PRELOAD=";

static int (*real_main)(int, char **, char **);

/* say sends one message to the agent; it truncates to MAX_SAY. */
static void say(const char *fmt, ...)
{
	static char buf[MAX_SAY];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		_exit(3);
	if ((size_t)n >= sizeof buf)
		n = sizeof buf - 1;
	while (send(CTL, buf, (size_t)n, MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			_exit(3);
}

/* hear reads the agent's next message into buf (NUL-terminated); the
 * agent gone, or a message that does not fit, ends the launcher. Any
 * descriptors it carries go to fds (up to nfds, the rest closed). */
static size_t hear(char *buf, size_t size, int *fds, int nfds, int *got)
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = {.iov_base = buf, .iov_len = size - 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n;
	while ((n = recvmsg(CTL, &msg, MSG_CMSG_CLOEXEC)) < 0)
		if (errno != EINTR)
			_exit(3);
	*got = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *in = (int *)CMSG_DATA(c);
		for (int i = 0; i < k; i++) {
			if (*got < nfds)
				fds[(*got)++] = in[i];
			else
				close(in[i]);
		}
	}
	if (n == 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		_exit(3);
	buf[n] = 0;
	return (size_t)n;
}

/* program_waiting says whether the agent's next message is already there. */
static int program_waiting(void)
{
	char c;
	ssize_t n = recv(CTL, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		_exit(3); /* the agent is gone */
	return n > 0;
}

/* fail tells the agent why the box cannot take a program, and exits. */
static void fail(const char *what)
{
	PyObject *type = NULL, *value = NULL, *tb = NULL;
	if (PyErr_Occurred()) {
		PyErr_Fetch(&type, &value, &tb);
		PyErr_NormalizeException(&type, &value, &tb);
		PyObject *s = value ? PyObject_Str(value) : NULL;
		const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
		say("fail %s: %s: %s", what, type ? ((PyTypeObject *)type)->tp_name : "?", msg ? msg : "?");
	} else {
		say("fail %s", what);
	}
	_exit(3);
}

/* The state a fresh interpreter has before its program, kept to be put
 * back. */
struct warnings_state {
	PyObject *filters, *once, *action;
	long version;
};

struct gc_state {
	int count[NUM_GENERATIONS];
	struct gc_generation_stats stats[NUM_GENERATIONS];
	Py_ssize_t long_lived_total, long_lived_pending;
	PyGC_Head held[NUM_GENERATIONS]; /* the interpreter's own objects, by generation */
};

static void save_warnings(PyInterpreterState *interp, struct warnings_state *s)
{
	struct _warnings_runtime_state *w = &interp->warnings;
	s->filters = PyList_GetSlice(w->filters, 0, PY_SSIZE_T_MAX);
	s->once = PyDict_Copy(w->once_registry);
	s->action = Py_NewRef(w->default_action);
	s->version = w->filters_version;
	if (s->filters == NULL || s->once == NULL)
		fail("saving the warnings filters");
}

/* restore_warnings puts s back; the registries of warnings already shown
 * are for filters that are gone: they are emptied, as a fresh interpreter
 * has none. */
static void restore_warnings(PyInterpreterState *interp, struct warnings_state *s)
{
	struct _warnings_runtime_state *w = &interp->warnings;
	if (PyList_SetSlice(w->filters, 0, PY_SSIZE_T_MAX, s->filters) < 0)
		fail("restoring the warnings filters");
	PyDict_Clear(w->once_registry);
	if (PyDict_Update(w->once_registry, s->once) < 0)
		fail("restoring the warnings once-registry");
	Py_SETREF(w->default_action, Py_NewRef(s->action));
	w->filters_version = s->version;
	PyObject *modules = PyImport_GetModuleDict();
	PyObject *key, *mod;
	Py_ssize_t pos = 0;
	while (PyDict_Next(modules, &pos, &key, &mod)) {
		if (!PyModule_Check(mod))
			continue;
		PyObject *reg = PyDict_GetItemString(PyModule_GetDict(mod), "__warningregistry__");
		if (reg != NULL && PyDict_Check(reg))
			PyDict_Clear(reg);
	}
}

static void free_warnings(struct warnings_state *s)
{
	Py_CLEAR(s->filters);
	Py_CLEAR(s->once);
	Py_CLEAR(s->action);
}

/* The collector's lists of tracked objects are doubly linked rings of
 * PyGC_Head; these move a whole ring, as gcmodule.c's gc_list_merge does. */
static void ring_init(PyGC_Head *head)
{
	head->_gc_next = (uintptr_t)head;
	head->_gc_prev = (uintptr_t)head;
}

static void ring_move(PyGC_Head *from, PyGC_Head *to)
{
	if (_PyGCHead_NEXT(from) != from) {
		PyGC_Head *tail = _PyGCHead_PREV(to), *first = _PyGCHead_NEXT(from), *last = _PyGCHead_PREV(from);
		_PyGCHead_SET_NEXT(tail, first);
		_PyGCHead_SET_PREV(first, tail);
		_PyGCHead_SET_NEXT(last, to);
		_PyGCHead_SET_PREV(to, last);
	}
	ring_init(from);
}

/* hold_gc saves the collector's state and sets the interpreter's own
 * objects aside, generation by generation, where no collection of the
 * preload's sees them (as it does not see frozen objects). */
static void hold_gc(PyInterpreterState *interp, struct gc_state *s)
{
	struct _gc_runtime_state *gc = &interp->gc;
	for (int i = 0; i < NUM_GENERATIONS; i++) {
		s->count[i] = gc->generations[i].count;
		s->stats[i] = gc->generation_stats[i];
		ring_init(&s->held[i]);
		ring_move(&gc->generations[i].head, &s->held[i]);
	}
	s->long_lived_total = gc->long_lived_total;
	s->long_lived_pending = gc->long_lived_pending;
}

/* freeze_preload collects what the preload left as garbage and freezes
 * the rest (gc.freeze's permanent generation), then gives the collector
 * the interpreter's own objects back, in the generations they were in. No
 * collection walks the preloaded modules' objects again: a program's
 * collections and its exit cost what they would in a fresh interpreter,
 * and gc.get_objects() finds what it would there. What a program hangs on
 * a preloaded module is released at exit all the same: the modules are
 * pinned (pin_modules), so finalisation clears each one's namespace, as
 * it clears every module still alive. */
static void freeze_preload(PyInterpreterState *interp, struct gc_state *s)
{
	struct _gc_runtime_state *gc = &interp->gc;
	PyGC_Collect();
	for (int i = 0; i < NUM_GENERATIONS; i++)
		ring_move(&gc->generations[i].head, &gc->permanent_generation.head);
	for (int i = 0; i < NUM_GENERATIONS; i++)
		ring_move(&s->held[i], &gc->generations[i].head);
}

/* restore_gc puts back the counts and statistics, the last thing before
 * the program: everything before allocates. */
static void restore_gc(PyInterpreterState *interp, const struct gc_state *s)
{
	struct _gc_runtime_state *gc = &interp->gc;
	for (int i = 0; i < NUM_GENERATIONS; i++) {
		gc->generations[i].count = s->count[i];
		gc->generation_stats[i] = s->stats[i];
	}
	gc->long_lived_total = s->long_lived_total;
	gc->long_lived_pending = s->long_lived_pending;
}

/* flush_std flushes what the preload may have printed (to pipes the agent
 * drops), so that none of it reaches the program's. */
static void flush_std(void)
{
	static const char *names[] = {"stdout", "stderr"};
	for (int i = 0; i < 2; i++) {
		PyObject *f = PySys_GetObject(names[i]);
		if (f == NULL || f == Py_None)
			continue;
		PyObject *r = PyObject_CallMethod(f, "flush", NULL);
		if (r == NULL)
			fail("flushing what the preload printed");
		Py_DECREF(r);
	}
}

/* read_preload_list reads the image's list: one module a line, '#'
 * comments. The image is untrusted: the list must be a regular file,
 * opened without following a last link or blocking on a FIFO, and is read
 * up to MAX_LIST bytes. (The launcher sees only the box's own files.) */
static char *read_preload_list(void)
{
	static char buf[MAX_LIST + 1];
	int fd = open(preload_file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? buf : NULL;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return NULL;
	}
	size_t n = 0;
	for (;;) {
		ssize_t k = read(fd, buf + n, MAX_LIST - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
		if (n == MAX_LIST)
			break;
	}
	close(fd);
	buf[n] = 0;
	return buf;
}

/* stat_fields reads the fields of /proc/self/stat that PR_SET_MM_MAP sets
 * (proc(5) numbers them from 1). */
static int stat_fields(unsigned long long f[53])
{
	char buf[4096];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the end of comm, which may hold anything */
	if (p == NULL)
		return -1;
	p++;
	for (int i = 3; i <= 52; i++) {
		while (*p == ' ')
			p++;
		if (i == 3) { /* state, a letter */
			f[i] = 0;
			p++;
			continue;
		}
		char *end;
		errno = 0;
		f[i] = strtoull(p, &end, 10);
		if (end == p || errno != 0)
			return -1;
		p = end;
	}
	return 0;
}

/* set_cmdline makes the process's command line and environment, as the
 * kernel shows them, those of `python3 -I -B -c CODE` started with the
 * environment it has (LD_PRELOAD gone): the code is written where the
 * stand-in was, the environment strings moved right after it, glibc's
 * environ pointed at them, and the kernel told where both now end. */
static int set_cmdline(char **argv, int argc, const char *code, size_t len)
{
	unsigned long long f[53];
	if (stat_fields(f) < 0)
		return -1;
	char *arg_start = (char *)f[48], *env_start = (char *)f[50], *env_end = (char *)f[51];
	char *slot = argv[argc - 1];
	if (argv[0] != arg_start || slot < arg_start || slot + strlen(slot) + 1 != env_start || env_end < env_start ||
	    len > strlen(slot)) {
		errno = EINVAL;
		return -1;
	}
	size_t envlen = (size_t)(env_end - env_start);
	char *old = malloc(envlen);
	if (old == NULL)
		return -1;
	memcpy(old, env_start, envlen);

	memcpy(slot, code, len);
	slot[len] = 0;
	char *arg_end = slot + len + 1, *q = arg_end;
	for (size_t off = 0; off < envlen;) {
		char *s = old + off;
		size_t n = strnlen(s, envlen - off);
		if (off + n == envlen)
			break; /* not NUL-terminated: not an environment string */
		char *was = env_start + off;
		off += n + 1;
		if (strncmp(s, ld_preload, sizeof ld_preload - 1) == 0)
			continue;
		memmove(q, s, n + 1);
		for (char **e = environ; *e != NULL; e++)
			if (*e == was)
				*e = q;
		q += n + 1;
	}
	memset(q, 0, (size_t)(env_end - q));
	free(old);

	struct prctl_mm_map map = {
		.start_code = f[26], .end_code = f[27], .start_data = f[45], .end_data = f[46],
		.start_brk = f[47], .brk = (unsigned long)syscall(SYS_brk, 0), .start_stack = f[28],
		.arg_start = (unsigned long)arg_start, .arg_end = (unsigned long)arg_end,
		.env_start = (unsigned long)arg_end, .env_end = (unsigned long)q,
		.auxv = NULL, .auxv_size = 0, .exe_fd = (__u32)-1,
	};
	return prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long)&map, sizeof map, 0);
}

/* set_program makes CODE the command Py_RunMain() runs, and the last word
 * of sys.orig_argv, decoded as the interpreter decoded its command line. */
static void set_program(PyInterpreterState *interp, const char *code)
{
	PyConfig *c = &interp->config;
	wchar_t *run = Py_DecodeLocale(code, NULL), *orig = Py_DecodeLocale(code, NULL);
	if (run == NULL || orig == NULL || c->orig_argv.length < 1 || c->run_command == NULL)
		fail("decoding the program");
	PyMem_RawFree(c->run_command);
	c->run_command = run;
	PyMem_RawFree(c->orig_argv.items[c->orig_argv.length - 1]);
	c->orig_argv.items[c->orig_argv.length - 1] = orig;
	PyObject *list = PySys_GetObject("orig_argv");
	PyObject *word = PyUnicode_FromWideChar(orig, -1);
	if (list == NULL || !PyList_Check(list) || PyList_GET_SIZE(list) < 1 || word == NULL ||
	    PyList_SetItem(list, PyList_GET_SIZE(list) - 1, word) < 0)
		fail("setting sys.orig_argv");
}

/* report_fds tells the agent which descriptors the program would inherit
 * besides the socket. */
static void report_fds(void)
{
	char line[4096] = "fds";
	size_t n = strlen(line);
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL)
		fail("listing /proc/self/fd");
	int skip = dirfd(d);
	int fds[256], k = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (e->d_name[0] == '.')
			continue;
		int fd = atoi(e->d_name);
		if (fd != skip && fd != CTL && k < 256)
			fds[k++] = fd;
	}
	closedir(d);
	for (int i = 1; i < k; i++) /* a handful: insertion sort */
		for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
			int t = fds[j];
			fds[j] = fds[j - 1];
			fds[j - 1] = t;
		}
	for (int i = 0; i < k && n < sizeof line - 16; i++)
		n += (size_t)snprintf(line + n, sizeof line - n, "%c%d", i ? ',' : ' ', fds[i]);
	say("%s", line);
}

/* note_modules records, for each module in sys.modules not seen yet, the
 * step of the preload that brought it (brought NULL: only notes them). */
static int note_modules(PyObject *seen, PyObject *brought, size_t step)
{
	PyObject *modules = PyImport_GetModuleDict(), *key, *value;
	Py_ssize_t pos = 0;
	while (PyDict_Next(modules, &pos, &key, &value)) {
		int known = PySet_Contains(seen, key);
		if (known < 0 || (!known && PySet_Add(seen, key) < 0))
			return -1;
		if (known || brought == NULL)
			continue;
		PyObject *k = PyLong_FromSize_t(step);
		if (k == NULL || PyDict_SetItem(brought, key, k) < 0)
			return -1;
		Py_DECREF(k);
	}
	return 0;
}

/* pin_modules keeps a reference to every module the preload brought, so
 * that none dies before finalisation clears the namespaces of the modules
 * still alive: a module that died there would leave its namespace to the
 * collector, which does not see frozen objects, and what a program stored
 * in it (a file, say) would never be released. */
static void pin_modules(PyObject *brought)
{
	PyObject *modules = PyImport_GetModuleDict(), *key, *value;
	Py_ssize_t pos = 0;
	while (PyDict_Next(brought, &pos, &key, &value)) {
		PyObject *m = PyDict_GetItem(modules, key);
		if (m != NULL)
			Py_INCREF(m); /* never released: the process ends first */
	}
}

/* init starts the interpreter from the process's command line exactly as
 * python3's main() does (Modules/main.c, pymain_init). */
static void init(int argc, char **argv)
{
	PyPreConfig pre;
	PyPreConfig_InitPythonConfig(&pre);
	PyStatus st = Py_PreInitializeFromBytesArgs(&pre, argc, argv);
	if (!PyStatus_Exception(st)) {
		PyConfig config;
		PyConfig_InitPythonConfig(&config);
		st = PyConfig_SetBytesArgv(&config, argc, argv);
		if (!PyStatus_Exception(st))
			st = Py_InitializeFromConfig(&config);
		PyConfig_Clear(&config);
	}
	if (PyStatus_Exception(st)) {
		say("fail the interpreter did not start: %s", st.err_msg ? st.err_msg : "exit");
		Py_ExitStatusException(st);
	}
}

static int warm_main(int argc, char **argv, char **envp)
{
	/* Whatever else happens, nothing this process starts loads the
	 * launcher again. */
	unsetenv("LD_PRELOAD");
	int type = 0;
	socklen_t tlen = sizeof type;
	if (argc < 2 || getsockopt(CTL, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_SEQPACKET)
		return real_main(argc, argv, environ); /* not a warm box: plain python3 */
	(void)envp;
	if (fcntl(CTL, F_SETFD, FD_CLOEXEC) < 0)
		_exit(3);
	unsigned int mapsize = 0;
	if (prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE, (unsigned long)&mapsize, 0, 0) != 0 || mapsize != sizeof(struct prctl_mm_map)) {
		say("fail this kernel cannot set a process's command line (prctl PR_SET_MM_MAP needs CONFIG_CHECKPOINT_RESTORE)");
		_exit(3);
	}

	init(argc, argv);
	PyInterpreterState *interp = PyInterpreterState_Get();
	static struct gc_state gc0;
	hold_gc(interp, &gc0);
	char *list = read_preload_list();
	if (list == NULL)
		fail("reading the preload list");
	size_t nmods = 1;
	for (char *p = list; *p; p++)
		nmods += *p == '\n';
	/* Per module of the list, the warnings state after it (warn[0] is
	 * before the first). */
	struct warnings_state *warn = calloc(nmods + 1, sizeof *warn);
	/* Which module of the list brought each module into sys.modules. */
	PyObject *seen = PySet_New(NULL), *brought = PyDict_New();
	if (warn == NULL || seen == NULL || brought == NULL || note_modules(seen, NULL, 0) < 0)
		fail("memory");
	save_warnings(interp, &warn[0]);

	static char msg[MAX_CODE + 64];
	int fds[2], got;
	say("initialized");
	hear(msg, sizeof msg, fds, 2, &got);
	if (got != 0 || strcmp(msg, "preload") != 0)
		_exit(3);

	/* The preload, one module at a time; a program that comes meanwhile
	 * is not kept waiting for the rest. It may not start a process or a
	 * thread (RLIMIT_NPROC 0 for this unprivileged user makes fork and
	 * clone fail with EAGAIN): what a child costs would count in the
	 * program's RUSAGE_CHILDREN, and a thread would run under it. Pandas
	 * asks `uname -p` at import; failing that, platform says what it
	 * says on Linux anyway, "". */
	struct rlimit nproc;
	if (getrlimit(RLIMIT_NPROC, &nproc) != 0 || setrlimit(RLIMIT_NPROC, &(struct rlimit){0, nproc.rlim_max}) != 0)
		fail("RLIMIT_NPROC");
	static char done[MAX_LIST + 16] = "ready";
	size_t steps = 0, dn = strlen(done);
	for (char *line = list, *next; *line && !program_waiting(); line = next) {
		next = strchr(line, '\n');
		next = next ? (*next = 0, next + 1) : line + strlen(line);
		char *name = line + strspn(line, " \t\r");
		name[strcspn(name, " \t\r")] = 0;
		if (*name == 0 || *name == '#')
			continue;
		say("importing %s", name);
		PyObject *m = PyImport_ImportModule(name);
		if (m == NULL)
			fail(name);
		Py_DECREF(m);
		if (note_modules(seen, brought, steps) < 0)
			fail("listing sys.modules");
		save_warnings(interp, &warn[steps + 1]);
		steps++;
		dn += (size_t)snprintf(done + dn, sizeof done - dn, " %s", name);
	}
	if (setrlimit(RLIMIT_NPROC, &nproc) != 0)
		fail("RLIMIT_NPROC");
	flush_std();
	freeze_preload(interp, &gc0);
	say("%s", done);

	/* The program, its stdout and its stderr. */
	size_t n = hear(msg, sizeof msg, fds, 2, &got);
	if (got != 2 || n < 4 || memcmp(msg, "run\n", 4) != 0 || memchr(msg + 4, 0, n - 4) != NULL || n - 4 > MAX_CODE)
		fail("the hand-over did not bring a program with its stdout and stderr");
	const char *code = msg + 4;
	if (dup2(fds[0], 1) < 0 || dup2(fds[1], 2) < 0)
		fail("dup2");
	close(fds[0]);
	close(fds[1]);
	if (set_cmdline(argv, argc, code, n - 4) != 0) {
		char why[256];
		snprintf(why, sizeof why, "setting the command line: %s", strerror(errno));
		fail(why);
	}
	set_program(interp, code);
	report_fds();

	/* "go K": what the first K modules of the list set at import stays
	 * (the agent reads the program's imports against the list). */
	char go[64];
	hear(go, sizeof go, fds, 2, &got);
	char *end;
	unsigned long keep = strncmp(go, "go ", 3) == 0 ? strtoul(go + 3, &end, 10) : (end = go, 0);
	if (got != 0 || end == go + 3 || *end != 0)
		_exit(3);
	close(CTL);
	pin_modules(brought);

	/* Back to a fresh interpreter's state, the collector last: everything
	 * before allocates. */
	if (keep < steps)
		restore_warnings(interp, &warn[keep]);
	for (size_t i = 0; i <= steps; i++)
		free_warnings(&warn[i]);
	free(warn);
	Py_DECREF(seen);
	Py_DECREF(brought);
	restore_gc(interp, &gc0);
	return Py_RunMain();
}

/* __libc_start_main is how python3 reaches its main(); the launcher
 * starts warm_main in its place, with everything the C runtime sets up
 * already done. */
__attribute__((visibility("default"))) int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv,
                                                              void (*init_fn)(void), void (*fini)(void),
                                                              void (*rtld_fini)(void), void *stack_end)
{
	typedef int (*start_fn)(int (*)(int, char **, char **), int, char **, void (*)(void), void (*)(void),
	                        void (*)(void), void *);
	start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
	if (real == NULL)
		_exit(127);
	real_main = main;
	return real(warm_main, argc, argv, init_fn, fini, rtld_fini, stack_end);
}
