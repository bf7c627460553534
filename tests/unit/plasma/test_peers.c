/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Store clients are who the kernel says they are (issue 21, point 5): the pid a client writes
 * in PlasmaConnect is not believed, a slot is reclaimed once its process is gone (wherever it
 * claimed to be, whatever pid namespace it runs in), and one uid cannot take every slot.
 * Forged connects go through raw sockets, as a hostile client would send them.
 */
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "client_test.h"
#include "common/frame.h"
#include "common/wire.h"
#include "plasma/server_int.h"

#define MIB (1ull << 20)
#define NOBODY 65534u
#define OTHER_UID 65533u

/* ---- a hostile client: raw frames ---- */

static int raw_connect(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (strlen(path) >= sizeof(a.sun_path)) {
		close(fd);
		return -1;
	}
	memcpy(a.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int read_full(int fd, uint8_t *buf, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = read(fd, buf + done, n - done); /* passed fds are dropped by read() */

		if (k <= 0)
			return -1;
		done += (size_t)k;
	}
	return 0;
}

/*
 * Send PlasmaConnect claiming @pid on @fd and read the reply. Returns its status (0: the store
 * gave us *@slot), or 1 when the exchange itself failed. No test asserts here: it also runs in
 * children that report through their exit code.
 */
static int forged_connect(int fd, int32_t pid, uint32_t *slot)
{
	struct ferry__wire_plasma_connect m = {.seq = 1, .pid = pid, .name = "forger"};
	struct ferry__fb_builder b = {0};
	struct ferry__frame_header h;
	uint8_t head[FERRY_FRAME_HEADER_SIZE], *payload = NULL;
	const uint8_t *frame;
	size_t size;
	int r = 1;

	if (ferry__wire_plasma_connect_build(&b, &m) < 0 ||
	    ferry__frame_finish(&b, FERRY__WIRE_MSG_PLASMA_CONNECT, &frame, &size) < 0 ||
	    write(fd, frame, size) != (ssize_t)size || read_full(fd, head, sizeof(head)) < 0 ||
	    ferry__frame_header_decode(head, 1u << 20, &h) < 0 ||
	    h.type != FERRY__WIRE_MSG_PLASMA_CONNECT_REPLY || !(payload = malloc(h.length)) ||
	    read_full(fd, payload, h.length) < 0 ||
	    ferry__wire_verify(h.type, payload, h.length) < 0)
		goto out;
	{
		struct ferry__wire_plasma_connect_reply_view v =
			ferry__wire_plasma_connect_reply_root_verified(payload);

		r = ferry__wire_plasma_connect_reply_status(v);
		if (slot)
			*slot = ferry__wire_plasma_connect_reply_client_slot(v);
	}
out:
	free(payload);
	ferry__fb_builder_fini(&b);
	return r;
}

static int wait_child(pid_t pid)
{
	int status = 0;

	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* ---- the pid in PlasmaConnect is not believed ---- */

/*
 * 70 connect-and-close cycles claiming pid 1 (alive forever), from a process that then exits,
 * used to leave every slot parked for "pid 1" and lock every later client out (-EUSERS). The
 * store now watches the process the kernel names: once it is gone, so are its slots.
 */
FTEST(forged_pid_cycles_do_not_lock_the_store)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	pid_t forger;

	store_spawn(&t, (struct ferry__plasma_server_opts){.memory_bytes = 16 * MIB});
	forger = fork();
	ftest_assert_int_ge(forger, 0);
	if (forger == 0) {
		int granted = 0;

		for (int i = 0; i < 70; i++) {
			int fd = raw_connect(t.path), r;

			if (fd < 0)
				_exit(2);
			r = forged_connect(fd, 1, NULL);
			close(fd); /* no PlasmaDisconnect: as a crash looks */
			if (r == 1)
				_exit(3);
			granted += r == 0;
		}
		_exit(granted > 0 ? 0 : 4);
	}
	ftest_assert_int_eq(wait_child(forger), 0);
	/* The forger is gone: a normal client gets a slot and works. */
	ftest_assert_ok(ferry_plasma_client_connect(t.path, NULL, &c));
	client_put(c, 1, 1000);
	client_check(c, 1, 1000, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* The slot records the pid the kernel reports, not the one claimed. */
FTEST(claimed_pid_is_replaced_by_the_kernels)
{
	char path[256];
	struct ferry__plasma_server_opts o = {
		.socket_path = path,
		.memory_bytes = 16 * MIB,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT,
	};
	struct ferry__plasma_server *srv;
	struct ferry__plasma_client *c;
	uint32_t slot = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/s.sock", ftest_tmpdir());
	ftest_assert_ok(ferry__plasma_server_start_new(&o, &srv));
	fd = raw_connect(path);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(forged_connect(fd, 12345, &slot), 0);
	c = ferry__plasma_index_client(srv->ix, slot);
	/* The store thread publishes the pid by its release of the slot's state (the reply came
	 * over a socket, which orders nothing for TSan); read it as other readers do. */
	ftest_assert_int_eq(atomic_load(&c->state), FERRY__PLASMA_CLIENT_LIVE);
	ftest_assert_int_eq(c->pid, (int)getpid());
	close(fd);
	ferry__plasma_server_destroy(srv);
}

/*
 * The connecting process dies while a child it forked keeps the socket open: the store sees no
 * close, but the process it admitted is gone, so its slot goes to the next client (which needs
 * it: one usable slot) rather than waiting for a close that may never come.
 */
FTEST(slot_of_a_dead_process_is_taken_back_while_its_socket_lives_on)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	int hold[2];
	pid_t client;

	store_spawn(&t,
		    (struct ferry__plasma_server_opts){.memory_bytes = 16 * MIB, .max_clients = 2});
	ftest_assert_int_eq(pipe(hold), 0);
	client = fork();
	ftest_assert_int_ge(client, 0);
	if (client == 0) {
		pid_t keeper;
		char b;

		close(hold[1]);
		if (ferry_plasma_client_connect(t.path, NULL, &c) < 0)
			_exit(2);
		keeper = fork(); /* inherits the socket; lives until the test closes hold[1] */
		if (keeper == 0)
			_exit(read(hold[0], &b, 1) < 0);
		_exit(keeper < 0 ? 3 : 0);
	}
	close(hold[0]);
	ftest_assert_int_eq(wait_child(client), 0);
	ftest_assert_ok(ferry_plasma_client_connect(t.path, NULL, &c));
	client_put(c, 1, 1000);
	client_check(c, 1, 1000, 0);
	ferry_plasma_client_disconnect(c);
	close(hold[1]);
	store_stop(&t);
}

/* ---- one uid cannot take every slot ---- */

/* As root: let @uid reach the store's socket in the test's private directory. */
static void open_to_others(const char *sock)
{
	ftest_assert_int_eq(chmod(ftest_tmpdir(), 0711), 0);
	ftest_assert_int_eq(chmod(sock, 0666), 0);
}

/* In a child: become @uid, connect @n clients, and exit with what the last connect said
 * (as -r, 0 ok) or 100 + the first failure's index. */
static void connect_as(uid_t uid, const char *path, int n, int *pipe_done)
{
	struct ferry_plasma_client *c[64];
	char b;
	int r = 0;

	if (setgid(uid) < 0 || setuid(uid) < 0)
		_exit(99);
	for (int i = 0; i < n; i++) {
		r = ferry_plasma_client_connect(path, NULL, &c[i]);
		if (r < 0 && i < n - 1)
			_exit(100 + i);
	}
	/* Hold the slots until the parent has looked (then exit: the store reclaims them). */
	if (pipe_done && read(pipe_done[0], &b, 1) < 0)
		_exit(98);
	_exit(-r);
}

/*
 * The default cap is half the client slots (31 of 63): a 32nd client of uid nobody is refused
 * with -EUSERS while another uid, and root, still connect.
 */
FTEST(uid_over_its_cap_is_refused_others_still_connect)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	int hold[2];
	pid_t nobody, other;
	char b = 0;

	if (geteuid() != 0)
		ftest_skip("needs root to run clients as other uids");
	store_spawn(&t, (struct ferry__plasma_server_opts){.memory_bytes = 16 * MIB});
	open_to_others(t.path);
	ftest_assert_int_eq(pipe(hold), 0);
	nobody = fork();
	ftest_assert_int_ge(nobody, 0);
	if (nobody == 0) {
		close(hold[1]);
		connect_as(NOBODY, t.path, 32, hold);
	}
	close(hold[0]);
	other = fork();
	ftest_assert_int_ge(other, 0);
	if (other == 0)
		connect_as(OTHER_UID, t.path, 1, NULL);
	ftest_assert_int_eq(wait_child(other), 0);
	ftest_assert_ok(ferry_plasma_client_connect(t.path, NULL, &c));
	client_put(c, 1, 1000);
	client_check(c, 1, 1000, 0);
	ferry_plasma_client_disconnect(c);
	ftest_assert_int_eq(write(hold[1], &b, 1), 1);
	close(hold[1]);
	ftest_assert_int_eq(wait_child(nobody), EUSERS);
	store_stop(&t);
}

/* ---- pid namespaces ---- */

/* Pid 1 of a new pid namespace: put and read an object, then die holding the slot. */
static void namespaced_client(const char *path)
{
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(7);
	struct ferry_plasma_view v;
	void *d;

	if (getpid() != 1)
		_exit(10);
	if (ferry_plasma_client_connect(path, NULL, &c) < 0)
		_exit(11);
	if (ferry_plasma_client_create(c, &id, 100, NULL, 0, &d) < 0)
		_exit(12);
	memset(d, 0x5a, 100);
	if (ferry_plasma_client_seal(c, &id) < 0 || ferry_plasma_client_get(c, &id, 1, 0, &v) < 0 ||
	    v.status != 0 || ((const uint8_t *)v.data)[99] != 0x5a)
		_exit(13);
	_exit(0); /* no disconnect, a pin still held: the store cleans up */
}

/*
 * A client in another pid namespace says it is pid 1, which in the store's namespace is init:
 * its slot used to stay parked forever. Now the kernel translates its pid and the store gets
 * the slot back when it exits. One usable slot makes the reclaim visible: the next client
 * needs it.
 */
FTEST(client_in_a_pid_namespace_works_and_its_slot_is_reclaimed)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(7);
	struct ferry_plasma_view v;
	pid_t outer;

	if (geteuid() != 0)
		ftest_skip("needs root for unshare(CLONE_NEWPID)");
	store_spawn(&t,
		    (struct ferry__plasma_server_opts){.memory_bytes = 16 * MIB, .max_clients = 2});
	outer = fork();
	ftest_assert_int_ge(outer, 0);
	if (outer == 0) {
		pid_t inner;
		int status = 0;

		if (unshare(CLONE_NEWPID) < 0)
			_exit(77);
		inner = fork();
		if (inner < 0)
			_exit(20);
		if (inner == 0)
			namespaced_client(t.path);
		if (waitpid(inner, &status, 0) != inner || !WIFEXITED(status))
			_exit(21);
		_exit(WEXITSTATUS(status));
	}
	switch (wait_child(outer)) {
	case 77:
		store_stop(&t);
		ftest_skip("unshare(CLONE_NEWPID) is not permitted here");
		break;
	case 0:
		break;
	default:
		FTEST__FAIL("the client in the pid namespace failed");
	}
	/* Its object survived it; its pin did not keep the slot. */
	ftest_assert_ok(ferry_plasma_client_connect(t.path, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_get(c, &id, 1, 0, &v));
	ftest_assert_int_eq(v.status, 0);
	ftest_assert_uint_eq(v.data_size, 100);
	ftest_assert_uint_eq(((const uint8_t *)v.data)[99], 0x5a);
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}
