/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's worker pool and leases (node/rt_*.c) against a real GCS and a node in this process
 * whose workers are fake_worker processes (built beside this test): prestarted workers register
 * in the GCS workers table; a lease is granted with the worker's socket; a second owner waits
 * until the first returns; a worker killed with SIGKILL has its lease revoked at once with the
 * signal, is replaced and is marked dead in the GCS; an owner that disconnects returns its
 * leases; bad RuntimeConnects are refused and logged while the node keeps serving; a failed
 * WorkerAssign fails the lease naming the reason; a stop leaves no process and no socket.
 * Placement groups' bundles (node/rt_bundle.c): prepare, commit, cancel and return answered
 * (a bogus commit with an error), leases into a bundle granted from its reservation only and
 * without holding back the node's free set, released with their owner or at the prepare
 * deadline. ObjectsFree (node/rt_free.c) deletes the sender's objects from the store, a pinned
 * one at its last release, and leaves another owner's alone.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "cluster/embed.h"
#include "common/util.h"
#include "node/node.h"
#include "plasma/store.h"
#include "tests/harness/ftest.h"
#include "tests/integration/node/node_fx.h"
#include "tests/integration/node/rt_peer.h"

/* A hang guard for what must come (a worker registering, a grant), far above an honest wait. */
#define WAIT_MS 20000u
/* How long a request that must wait is watched for a wrong early grant. */
#define QUIET_MS 300u

static const char token[] = "node-workers-test-token";
/* worker_idle_ms of the next fx_start (0: the default). */
static uint32_t fx_idle_ms;
/* The worker executable of the next fx_start (NULL: the fake worker). */
static const char *fx_exe;

struct fx {
	struct ferry__embed_gcs *gcs;
	struct ferry__node *node;
	struct ferry_gcs_client *gc; /* the test's view of the GCS */
	struct ferry__fb_builder fb;
	char exe[4096];
};

/* A GCS, a node with @num_workers prestarted (< 0: none), at most @max, offering @cpus CPUs. */
static void fx_start(struct fx *f, int32_t num_workers, uint32_t max, const char *cpus)
{
	struct ferry__node_opts o;
	struct ferry_gcs_client_opts go = {0};
	struct node_fx_strings s;
	const char *addrs[1] = {s.gcs};

	memset(f, 0, sizeof(*f));
	if (fx_exe)
		snprintf(f->exe, sizeof(f->exe), "%s", fx_exe);
	else
		ftest_assert_ok(rtp_fake_worker_path(f->exe, sizeof(f->exe)));
	node_fx_begin(&o, &s, &f->gcs, token, f->exe);
	o.num_cpus = cpus;
	o.num_workers = num_workers;
	o.max_workers = max;
	o.worker_idle_ms = fx_idle_ms;
	ftest_assert_ok(ferry__node_start(&o, &f->node));
	go.addresses = addrs;
	go.naddresses = 1;
	go.token = token;
	go.token_len = strlen(token);
	ftest_assert_ok(ferry_gcs_client_connect(&go, &f->gc));
}

static void fx_stop(struct fx *f)
{
	ferry_gcs_client_destroy(f->gc);
	ferry__node_stop(f->node);
	ferry__embed_gcs_stop(f->gcs);
	ferry__fb_builder_fini(&f->fb);
}

/* ---- the GCS workers table ---- */

/* Alive (@alive) or dead workers of the table: how many, and the pid of one (@pid). */
static int count_workers(struct fx *f, bool alive, uint32_t *pid)
{
	struct ferry_gcs_worker_info *w = NULL;
	int n = ferry_gcs_worker_list(f->gc, &w), k = 0;

	ftest_assert_int_ge(n, 0);
	for (int i = 0; i < n; i++) {
		if ((w[i].state == FERRY_GCS_WORKER_ALIVE) == alive) {
			k++;
			if (pid)
				*pid = w[i].pid;
		}
	}
	ferry_gcs_free(w);
	return k;
}

static void wait_workers(struct fx *f, bool alive, int want)
{
	uint64_t deadline = ferry__now_ms() + WAIT_MS;

	while (count_workers(f, alive, NULL) != want) {
		ftest_assert_true(ferry__now_ms() < deadline);
		usleep(10000);
	}
}

/* The GCS record of worker @id (its fields copied out; message into @msg). */
static bool worker_record(struct fx *f, const uint8_t id[16], struct ferry_gcs_worker_info *out,
			  char *msg, size_t size)
{
	struct ferry_gcs_worker_info *w = NULL;
	int n = ferry_gcs_worker_list(f->gc, &w);
	bool found = false;

	for (int i = 0; i < n; i++) {
		if (!memcmp(w[i].id.bytes, id, 16)) {
			*out = w[i];
			snprintf(msg, size, "%s", w[i].exit_message ? w[i].exit_message : "");
			found = true;
		}
	}
	ferry_gcs_free(w);
	return found;
}

/* ---- a driver ---- */

/* A driver's runtime socket: its RuntimeConnect's status in *@status, its random ID in *@id
 * (NULL: not wanted). */
static int driver_connect_ex(struct fx *f, uint32_t version, int32_t pid, int *status,
			     struct ferry_worker_id *id)
{
	struct ferry__wire_runtime_connect m = {
		.protocol_version = version, .kind = FERRY__WIRE_PEER_KIND_DRIVER, .pid = pid};
	struct rtp_frame fr;
	int fd = rtp_connect(ferry__node_runtime_socket(f->node));

	ftest_assert_int_ge(fd, 0);
	ferry_id_random(m.id.bytes, sizeof(m.id.bytes));
	ferry_id_random(m.job.bytes, sizeof(m.job.bytes));
	if (id)
		memcpy(id->bytes, m.id.bytes, sizeof(id->bytes));
	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_RUNTIME_CONNECT,
				 ferry__wire_runtime_connect_build(&f->fb, &m)));
	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY);
	*status = ferry__wire_runtime_connect_reply_status(
		ferry__wire_runtime_connect_reply_root_verified(fr.payload));
	rtp_frame_free(&fr);
	return fd;
}

static int driver_connect(struct fx *f)
{
	int status, fd = driver_connect_ex(f, FERRY_WIRE_PROTOCOL_VERSION, (int32_t)getpid(),
					   &status, NULL);

	ftest_assert_int_eq(status, 0);
	return fd;
}

static void request_lease(struct fx *f, int fd, uint64_t request_id, const uint8_t job[16],
			  const char *code_path)
{
	struct ferry__wire_runtime_resource cpu = {.name = "CPU", .amount = 1.0};
	struct ferry__wire_lease_request m = {.request_id = request_id,
					      .code_path = code_path,
					      .resources = &cpu,
					      .resources_count = 1};

	memcpy(m.job.bytes, job, 16);
	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_LEASE_REQUEST,
				 ferry__wire_lease_request_build(&f->fb, &m)));
}

struct grant {
	int status;
	uint64_t lease_id;
	uint8_t worker_id[16];
	char path[108];
	char message[512];
};

static void read_grant(int fd, uint64_t request_id, struct grant *g)
{
	struct rtp_frame fr;
	struct ferry__wire_lease_grant_view v;
	const char *s;

	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_LEASE_GRANT);
	v = ferry__wire_lease_grant_root_verified(fr.payload);
	ftest_assert_uint_eq(ferry__wire_lease_grant_request_id(v), request_id);
	g->status = ferry__wire_lease_grant_status(v);
	g->lease_id = ferry__wire_lease_grant_lease_id(v);
	memcpy(g->worker_id, ferry__wire_lease_grant_worker_id(v).bytes, 16);
	s = ferry__wire_lease_grant_worker_path(v);
	snprintf(g->path, sizeof(g->path), "%s", s ? s : "");
	s = ferry__wire_lease_grant_message(v);
	snprintf(g->message, sizeof(g->message), "%s", s ? s : "");
	rtp_frame_free(&fr);
}

static void return_lease(struct fx *f, int fd, uint64_t lease_id)
{
	struct ferry__wire_lease_return m = {.lease_id = lease_id};

	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_LEASE_RETURN,
				 ferry__wire_lease_return_build(&f->fb, &m)));
}

static void nothing_within(int fd, unsigned ms)
{
	struct rtp_frame fr;

	ftest_assert_errno(rtp_recv(fd, &fr, ms), -ETIMEDOUT);
}

static uint32_t pid_of(struct fx *f, const uint8_t id[16])
{
	struct ferry_gcs_worker_info w;
	char msg[8];
	uint64_t deadline = ferry__now_ms() + WAIT_MS;

	/* The add is asynchronous: the grant may overtake it by a moment. */
	while (!worker_record(f, id, &w, msg, sizeof(msg))) {
		ftest_assert_true(ferry__now_ms() < deadline);
		usleep(10000);
	}
	return w.pid;
}

/* ---- tests ---- */

FTEST(prestarted_workers_register)
{
	struct fx f;
	struct ferry_gcs_worker_info w;
	struct ferry_gcs_worker_info *all = NULL;
	int n;

	fx_start(&f, 2, 4, "2");
	wait_workers(&f, true, 2);
	n = ferry_gcs_worker_list(f.gc, &all);
	ftest_assert_int_eq(n, 2);
	w = all[0];
	ftest_assert_mem_eq(w.node.bytes, ferry__node_id(f.node)->bytes, 16);
	ftest_assert_ptr_notnull(w.address);
	ftest_assert_int_eq(access(w.address, F_OK), 0); /* the worker's socket */
	ferry_gcs_free(all);
	fx_stop(&f);
}

FTEST(lease_granted_then_second_owner_waits)
{
	struct fx f;
	uint8_t job[16];
	struct grant a, b;
	uint64_t t0;
	int fa, fb;

	fx_start(&f, 1, 2, "1"); /* room for a second worker, not for a second CPU */
	ferry_id_random(job, sizeof(job));
	fa = driver_connect(&f);
	fb = driver_connect(&f);
	wait_workers(&f, true, 1);
	t0 = ferry__now_ns();
	request_lease(&f, fa, 1, job, "/jobs/good.so");
	read_grant(fa, 1, &a);
	ftest_log("first lease (WorkerAssign included): %.0f us",
		  (double)(ferry__now_ns() - t0) / 1e3);
	ftest_assert_int_eq(a.status, 0);
	ftest_assert_int_eq(access(a.path, F_OK), 0);
	/* One CPU: the second owner waits for the first. */
	request_lease(&f, fb, 7, job, "/jobs/good.so");
	nothing_within(fb, QUIET_MS);
	t0 = ferry__now_ns();
	return_lease(&f, fa, a.lease_id);
	read_grant(fb, 7, &b);
	ftest_log("LeaseReturn to the waiting owner's grant: %.0f us",
		  (double)(ferry__now_ns() - t0) / 1e3);
	ftest_assert_int_eq(b.status, 0);
	ftest_assert_mem_eq(b.worker_id, a.worker_id, 16); /* the same worker, job kept */
	ftest_assert_uint_ne(b.lease_id, a.lease_id);
	close(fa);
	close(fb);
	fx_stop(&f);
}

/* A worker executable that is not ferry-worker (it exits at once, as /bin/true does): the node
 * does not restart it forever while the owner waits; after a few early deaths in a row the
 * lease fails with -ENOEXEC naming the executable. */
FTEST(a_worker_exe_that_exits_at_once_fails_the_lease)
{
	struct fx f;
	uint8_t job[16];
	struct grant g;
	int fd;

	fx_exe = "/bin/true";
	fx_start(&f, -1, 2, "1");
	fx_exe = NULL;
	ferry_id_random(job, sizeof(job));
	fd = driver_connect(&f);
	ftest_log_capture_start();
	request_lease(&f, fd, 1, job, "/jobs/good.so");
	read_grant(fd, 1, &g);
	ftest_log("grant: %d %s", g.status, g.message);
	ftest_assert_int_eq(g.status, -ENOEXEC);
	ftest_assert_true(strstr(g.message, "/bin/true") != NULL);
	ftest_assert_true(strstr(g.message, "before they connect") != NULL);
	ftest_assert_true(strstr(ftest_log_captured(), "end before they connect") != NULL);
	ftest_log_capture_stop();
	close(fd);
	fx_stop(&f);
}

FTEST(owner_disconnect_returns_its_leases)
{
	struct fx f;
	uint8_t job[16];
	struct grant a, b;
	int fa, fb;

	fx_start(&f, 1, 1, "1");
	ferry_id_random(job, sizeof(job));
	fa = driver_connect(&f);
	fb = driver_connect(&f);
	request_lease(&f, fa, 1, job, NULL);
	read_grant(fa, 1, &a);
	ftest_assert_int_eq(a.status, 0);
	request_lease(&f, fb, 2, job, NULL);
	nothing_within(fb, QUIET_MS);
	close(fa); /* a dead driver leaves nothing: its lease goes to the next */
	read_grant(fb, 2, &b);
	ftest_assert_int_eq(b.status, 0);
	close(fb);
	fx_stop(&f);
}

FTEST(killed_worker_revokes_its_lease)
{
	struct fx f;
	uint8_t job[16];
	struct grant a;
	struct rtp_frame fr;
	struct ferry__wire_lease_revoked_view v;
	struct ferry_gcs_worker_info rec;
	char msg[256];
	uint64_t deadline, t0;
	uint32_t pid;
	int fd;

	fx_start(&f, 1, 2, "2");
	ferry_id_random(job, sizeof(job));
	fd = driver_connect(&f);
	request_lease(&f, fd, 1, job, NULL);
	read_grant(fd, 1, &a);
	ftest_assert_int_eq(a.status, 0);
	pid = pid_of(&f, a.worker_id);
	t0 = ferry__now_ns();
	ftest_assert_ok(kill((pid_t)pid, SIGKILL));
	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_log("SIGKILL to LeaseRevoked: %.0f us", (double)(ferry__now_ns() - t0) / 1e3);
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_LEASE_REVOKED);
	v = ferry__wire_lease_revoked_root_verified(fr.payload);
	ftest_assert_uint_eq(ferry__wire_lease_revoked_lease_id(v), a.lease_id);
	ftest_assert_int_eq(ferry__wire_lease_revoked_term_signal(v), SIGKILL);
	ftest_assert_int_eq(ferry__wire_lease_revoked_status(v), -EPIPE);
	ftest_assert_ptr_notnull(strstr(ferry__wire_lease_revoked_message(v), "SIGKILL"));
	rtp_frame_free(&fr);
	/* The GCS says dead, with the signal; a replacement registers. */
	deadline = ferry__now_ms() + WAIT_MS;
	while (!worker_record(&f, a.worker_id, &rec, msg, sizeof(msg)) ||
	       rec.state != FERRY_GCS_WORKER_DEAD) {
		ftest_assert_true(ferry__now_ms() < deadline);
		usleep(10000);
	}
	ftest_assert_str_eq(msg, "killed by signal 9 (SIGKILL)");
	ftest_assert_int_eq(rec.exit_type, FERRY_GCS_EXIT_ERROR);
	wait_workers(&f, true, 1);
	close(fd);
	fx_stop(&f);
}

FTEST(worker_exit_status_recorded)
{
	struct fx f;
	uint8_t job[16];
	struct grant a;
	struct ferry__wire_push_task m = {.function = "exit:3", .num_returns = 1};
	struct ferry_gcs_worker_info rec;
	struct rtp_frame fr;
	char msg[256];
	uint64_t deadline;
	int fd, wfd;

	fx_start(&f, 1, 2, "2");
	ferry_id_random(job, sizeof(job));
	fd = driver_connect(&f);
	request_lease(&f, fd, 1, job, NULL);
	read_grant(fd, 1, &a);
	ftest_assert_int_eq(a.status, 0);
	(void)pid_of(&f, a.worker_id);
	wfd = rtp_connect(a.path);
	ftest_assert_int_ge(wfd, 0);
	ftest_assert_ok(rtp_send(wfd, &f.fb, FERRY__WIRE_MSG_PUSH_TASK,
				 ferry__wire_push_task_build(&f.fb, &m)));
	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_LEASE_REVOKED);
	ftest_assert_int_eq(ferry__wire_lease_revoked_exit_status(
				    ferry__wire_lease_revoked_root_verified(fr.payload)),
			    3);
	rtp_frame_free(&fr);
	deadline = ferry__now_ms() + WAIT_MS;
	while (!worker_record(&f, a.worker_id, &rec, msg, sizeof(msg)) ||
	       rec.state != FERRY_GCS_WORKER_DEAD) {
		ftest_assert_true(ferry__now_ms() < deadline);
		usleep(10000);
	}
	ftest_assert_str_eq(msg, "exited with status 3");
	close(wfd);
	close(fd);
	fx_stop(&f);
}

FTEST(failed_assign_fails_the_lease)
{
	struct fx f;
	uint8_t job[16];
	struct grant a, b;
	int fd;

	fx_start(&f, 1, 2, "2");
	ferry_id_random(job, sizeof(job));
	fd = driver_connect(&f);
	request_lease(&f, fd, 5, job, "/jobs/bad.so");
	read_grant(fd, 5, &a);
	ftest_assert_int_eq(a.status, -ENOENT);
	ftest_assert_ptr_notnull(strstr(a.message, "bad.so"));
	ftest_log("grant error: %s", a.message);
	/* That worker is not used again; a good job still gets one (a new worker). */
	request_lease(&f, fd, 6, job, "/jobs/good.so");
	read_grant(fd, 6, &b);
	ftest_assert_int_eq(b.status, 0);
	close(fd);
	fx_stop(&f);
}

FTEST(resources_the_node_lacks_wait_or_are_refused_when_placed)
{
	struct fx f;
	struct ferry__wire_runtime_resource gpu = {.name = "GPU", .amount = 1.0};
	struct ferry__wire_lease_request m = {
		.request_id = 9, .resources = &gpu, .resources_count = 1};
	struct grant g;
	int fd;

	fx_start(&f, -1, 2, "2");
	fd = driver_connect(&f);
	ferry_id_random(m.job.bytes, sizeof(m.job.bytes));
	/* Not placed: no node can run it, so it waits at the node as infeasible (rt_sched.c),
	 * unanswered; the placed request sent after it is answered first. */
	m.request_id = 10;
	ftest_assert_ok(rtp_send(fd, &f.fb, FERRY__WIRE_MSG_LEASE_REQUEST,
				 ferry__wire_lease_request_build(&f.fb, &m)));
	/* Placed here by a scheduler, yet the node has none: refused. */
	m.request_id = 9;
	m.placed = true;
	ftest_assert_ok(rtp_send(fd, &f.fb, FERRY__WIRE_MSG_LEASE_REQUEST,
				 ferry__wire_lease_request_build(&f.fb, &m)));
	read_grant(fd, 9, &g);
	ftest_assert_int_eq(g.status, -EINVAL);
	ftest_assert_ptr_notnull(strstr(g.message, "GPU"));
	close(fd);
	fx_stop(&f);
}

/* A worker's RuntimeConnect with the right id and secret (read from the worker's environment)
 * but from another process: refused, since the node checks the socket's pid. */
static int impostor_connect(struct fx *f, uint32_t pid)
{
	struct ferry__wire_runtime_connect m = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						.kind = FERRY__WIRE_PEER_KIND_WORKER,
						.pid = (int32_t)getpid(),
						.listen_path = "/tmp/impostor"};
	char path[64], env[8192];
	uint8_t secret[32];
	struct rtp_frame fr;
	FILE *fp;
	size_t n;
	int fd, status;

	snprintf(path, sizeof(path), "/proc/%u/environ", pid);
	fp = fopen(path, "re");
	ftest_assert_ptr_notnull(fp);
	n = fread(env, 1, sizeof(env) - 1, fp);
	fclose(fp);
	env[n] = '\0';
	for (char *e = env; e < env + n; e += strlen(e) + 1) {
		if (!strncmp(e, "FERRY_WORKER_ID=", 16))
			ftest_assert_ok(ferry_id_from_hex(e + 16, m.id.bytes, 16));
		if (!strncmp(e, "FERRY_WORKER_SECRET=", 20))
			ftest_assert_ok(ferry_id_from_hex(e + 20, secret, 32));
	}
	m.secret = secret;
	m.secret_count = 32;
	fd = rtp_connect(ferry__node_runtime_socket(f->node));
	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_RUNTIME_CONNECT,
				 ferry__wire_runtime_connect_build(&f->fb, &m)));
	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	status = ferry__wire_runtime_connect_reply_status(
		ferry__wire_runtime_connect_reply_root_verified(fr.payload));
	rtp_frame_free(&fr);
	close(fd);
	return status;
}

FTEST(bad_runtime_connects_are_refused)
{
	struct fx f;
	struct rtp_frame fr;
	uint8_t job[16];
	struct grant g;
	uint32_t pid = 0;
	int fd, status;

	fx_start(&f, 1, 2, "2");
	wait_workers(&f, true, 1);
	ftest_assert_int_eq(count_workers(&f, true, &pid), 1);
	ftest_log_capture_start();
	fd = driver_connect_ex(&f, FERRY_WIRE_PROTOCOL_VERSION + 1, (int32_t)getpid(), &status,
			       NULL);
	ftest_assert_int_eq(status, -EPROTO);
	ftest_assert_errno(rtp_recv(fd, &fr, WAIT_MS), -ECONNRESET); /* closed after */
	close(fd);
	fd = driver_connect_ex(&f, FERRY_WIRE_PROTOCOL_VERSION, 1, &status, NULL);
	ftest_assert_int_eq(status, -EACCES); /* a pid that is not the socket's */
	close(fd);
	ftest_assert_int_eq(impostor_connect(&f, pid), -EACCES);
	/* Not a RuntimeConnect at all. */
	fd = rtp_connect(ferry__node_runtime_socket(f.node));
	ftest_assert_ok(
		rtp_send(fd, &f.fb, FERRY__WIRE_MSG_LEASE_RETURN,
			 ferry__wire_lease_return_build(
				 &f.fb, &(struct ferry__wire_lease_return){.lease_id = 1})));
	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_assert_int_eq(ferry__wire_runtime_connect_reply_status(
				    ferry__wire_runtime_connect_reply_root_verified(fr.payload)),
			    -EPROTO);
	rtp_frame_free(&fr);
	close(fd);
	ftest_log_capture_stop();
	ftest_assert_ptr_notnull(strstr(ftest_log_captured(), "protocol version"));
	ftest_assert_ptr_notnull(strstr(ftest_log_captured(), "not the node's child"));
	ftest_assert_ptr_notnull(strstr(ftest_log_captured(), "not RuntimeConnect"));
	/* The node still serves, and the real worker was not disturbed. */
	fd = driver_connect(&f);
	ferry_id_random(job, sizeof(job));
	request_lease(&f, fd, 3, job, NULL);
	read_grant(fd, 3, &g);
	ftest_assert_int_eq(g.status, 0);
	close(fd);
	fx_stop(&f);
}

/* Children of this process, alive or not reaped yet (a zombie counts), of every thread: the
 * node's loop thread starts the workers. */
static int count_children(void)
{
	char dir[64], path[512], buf[32];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)getpid());
	d = opendir(dir);
	ftest_assert_ptr_notnull(d);
	while ((e = readdir(d))) {
		FILE *fp;

		if (e->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s/children", dir, e->d_name) >=
		    (int)sizeof(path))
			continue;
		fp = fopen(path, "re");
		if (!fp)
			continue;
		while (fscanf(fp, "%31s", buf) == 1)
			n++;
		fclose(fp);
	}
	closedir(d);
	return n;
}

FTEST(stop_leaves_no_process_and_no_socket)
{
	struct fx f;
	char rt_path[108], store_path[108];
	uint32_t pid = 0;
	struct stat st;

	fx_start(&f, 2, 4, "2");
	wait_workers(&f, true, 2);
	ftest_assert_int_eq(count_children(), 2);
	ftest_assert_int_eq(count_workers(&f, true, &pid), 2);
	snprintf(rt_path, sizeof(rt_path), "%s", ferry__node_runtime_socket(f.node));
	snprintf(store_path, sizeof(store_path), "%s", ferry__node_socket(f.node));
	ftest_assert_ok(stat(rt_path, &st));
	ferry_gcs_client_destroy(f.gc);
	f.gc = NULL;
	ferry__node_stop(f.node);
	f.node = NULL;
	ftest_assert_int_eq(count_children(), 0);
	ftest_assert_errno(kill((pid_t)pid, 0) < 0 ? -errno : 0, -ESRCH);
	ftest_assert_errno(stat(rt_path, &st) < 0 ? -errno : 0, -ENOENT);
	ftest_assert_errno(stat(store_path, &st) < 0 ? -errno : 0, -ENOENT);
	ferry__embed_gcs_stop(f.gcs);
	ferry__fb_builder_fini(&f.fb);
}

FTEST(idle_workers_above_the_prestarted_end)
{
	struct fx f;
	uint8_t job[16];
	struct grant a;
	int fd;

	fx_idle_ms = 50;
	fx_start(&f, -1, 2, "2"); /* none prestarted: started on demand, then reaped */
	ftest_assert_int_eq(count_children(), 0);
	ferry_id_random(job, sizeof(job));
	fd = driver_connect(&f);
	request_lease(&f, fd, 1, job, NULL);
	read_grant(fd, 1, &a);
	ftest_assert_int_eq(a.status, 0);
	return_lease(&f, fd, a.lease_id);
	wait_workers(&f, false, 1); /* ended after worker_idle_ms */
	ftest_assert_int_eq(count_children(), 0);
	close(fd);
	fx_stop(&f);
}

FTEST(silent_connections_cannot_lock_others_out)
{
	struct fx f;
	struct rtp_frame fr;
	int silent[80], fd;

	fx_start(&f, -1, 1, "1");
	for (int i = 0; i < 80; i++) {
		silent[i] = rtp_connect(ferry__node_runtime_socket(f.node));
		ftest_assert_int_ge(silent[i], 0);
	}
	/* Past 64 waiting for their RuntimeConnect, the oldest were closed to make room: at once,
	 * not at the 10 s deadline that would close them anyway. */
	ftest_assert_errno(rtp_recv(silent[0], &fr, 5000), -ECONNRESET);
	fd = driver_connect(&f);
	close(fd);
	for (int i = 0; i < 80; i++)
		close(silent[i]);
	fx_stop(&f);
}

/* Workers that ignore SIGTERM and outlive their node connection: stop sends SIGKILL after its
 * grace period and reaps them (not the last-resort kill after the wait gives up). */
FTEST(stop_kills_workers_that_ignore_sigterm)
{
	struct fx f;

	setenv("FAKE_WORKER_STUBBORN", "1", 1); /* the workers inherit it */
	fx_start(&f, 2, 2, "2");
	wait_workers(&f, true, 2);
	ftest_log_capture_start();
	ferry_gcs_client_destroy(f.gc);
	f.gc = NULL;
	ferry__node_stop(f.node);
	f.node = NULL;
	ftest_log_capture_stop();
	ftest_assert_int_eq(count_children(), 0);
	ftest_assert_ptr_notnull(strstr(ftest_log_captured(), "still alive 2 s after SIGTERM"));
	ftest_assert_ptr_null(strstr(ftest_log_captured(), "not reaped"));
	ferry__embed_gcs_stop(f.gcs);
	ferry__fb_builder_fini(&f.fb);
}

/* ---- placement groups' bundles (node/rt_bundle.c) ---- */

/* BundlePrepare of @cpus CPUs, or (other @type) a Commit, Cancel or Return: the three share
 * the layout of BundleCommit (runtime.fbs). */
static void send_bundle(struct fx *f, int fd, uint16_t type, uint64_t request_id,
			const uint8_t pg[16], uint32_t index, double cpus)
{
	struct ferry__wire_runtime_resource cpu = {.name = "CPU", .amount = cpus};
	struct ferry__wire_bundle_prepare p = {.request_id = request_id,
					       .bundle_index = index,
					       .resources = &cpu,
					       .resources_count = 1};
	struct ferry__wire_bundle_commit c = {.request_id = request_id, .bundle_index = index};

	memcpy(p.pg_id.bytes, pg, 16);
	memcpy(c.pg_id.bytes, pg, 16);
	if (type == FERRY__WIRE_MSG_BUNDLE_PREPARE)
		ftest_assert_ok(
			rtp_send(fd, &f->fb, type, ferry__wire_bundle_prepare_build(&f->fb, &p)));
	else
		ftest_assert_ok(
			rtp_send(fd, &f->fb, type, ferry__wire_bundle_commit_build(&f->fb, &c)));
}

/* The BundleReply to @request_id: its status (its message logged). */
static int bundle_reply(int fd, uint64_t request_id)
{
	struct rtp_frame fr;
	struct ferry__wire_bundle_reply_view v;
	const char *m;
	int status;

	ftest_assert_ok(rtp_recv(fd, &fr, WAIT_MS));
	ftest_assert_int_eq(fr.type, FERRY__WIRE_MSG_BUNDLE_REPLY);
	v = ferry__wire_bundle_reply_root_verified(fr.payload);
	ftest_assert_uint_eq(ferry__wire_bundle_reply_request_id(v), request_id);
	status = ferry__wire_bundle_reply_status(v);
	m = ferry__wire_bundle_reply_message(v);
	ftest_log("bundle request %llu: %d %s", (unsigned long long)request_id, status, m ? m : "");
	rtp_frame_free(&fr);
	return status;
}

static int bundle_do(struct fx *f, int fd, uint16_t type, uint64_t request_id, const uint8_t pg[16],
		     uint32_t index, double cpus)
{
	send_bundle(f, fd, type, request_id, pg, index, cpus);
	return bundle_reply(fd, request_id);
}

/* A lease of 1 CPU into bundle @index of @pg (NULL: from the node's free set). */
static void request_lease_in(struct fx *f, int fd, uint64_t request_id, const uint8_t job[16],
			     const uint8_t *pg, int32_t index)
{
	struct ferry__wire_runtime_resource cpu = {.name = "CPU", .amount = 1.0};
	struct ferry__wire_lease_request m = {
		.request_id = request_id, .resources = &cpu, .resources_count = 1};

	memcpy(m.job.bytes, job, 16);
	if (pg) {
		memcpy(m.pg_id.bytes, pg, 16);
		m.bundle_index = index;
	}
	ftest_assert_ok(rtp_send(fd, &f->fb, FERRY__WIRE_MSG_LEASE_REQUEST,
				 ferry__wire_lease_request_build(&f->fb, &m)));
}

FTEST(bundles_two_phase_commit_and_leases_in_them)
{
	struct fx f;
	uint8_t job[16], pg[16], other[16];
	struct grant a, b, c;
	int fa, fb;

	fx_start(&f, 2, 4, "2");
	ferry_id_random(job, sizeof(job));
	ferry_id_random(pg, sizeof(pg));
	ferry_id_random(other, sizeof(other));
	fa = driver_connect(&f); /* the group's owner */
	fb = driver_connect(&f); /* another driver, on the node's free set */
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_PREPARE, 1, pg, 0, 1.0), 0);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_PREPARE, 2, pg, 0, 1.0),
			    -EEXIST);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_PREPARE, 3, pg, 1, 3.0),
			    -EINVAL); /* more than the node has */
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_PREPARE, 4, pg, 1, 2.0),
			    -EAGAIN); /* more than it has free */
	/* Not committed yet: no lease from it. */
	request_lease_in(&f, fa, 10, job, pg, 0);
	read_grant(fa, 10, &a);
	ftest_assert_int_eq(a.status, -ENOENT);
	/* Another connection may not commit it; a bogus commit is answered, not obeyed. */
	ftest_assert_int_eq(bundle_do(&f, fb, FERRY__WIRE_MSG_BUNDLE_COMMIT, 5, pg, 0, 0), -ENOENT);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_COMMIT, 6, other, 0, 0),
			    -ENOENT);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_COMMIT, 7, pg, 0, 0), 0);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_CANCEL, 8, pg, 0, 0),
			    -EINVAL); /* committed: returned, not cancelled */
	/* A bundle of 1 CPU: one lease at a time in it, whatever the node has free. */
	request_lease_in(&f, fa, 11, job, pg, 0);
	read_grant(fa, 11, &a);
	ftest_assert_int_eq(a.status, 0);
	request_lease_in(&f, fa, 12, job, pg, -1);
	nothing_within(fa, QUIET_MS);
	/* The node's other CPU serves the free set: the waiting bundle lease holds nothing
	 * back; then the free set is empty. */
	request_lease_in(&f, fb, 20, job, NULL, 0);
	read_grant(fb, 20, &b);
	ftest_assert_int_eq(b.status, 0);
	request_lease_in(&f, fb, 21, job, NULL, 0);
	nothing_within(fb, QUIET_MS);
	return_lease(&f, fa, a.lease_id); /* back to the bundle: the bundle's waiter gets it */
	read_grant(fa, 12, &c);
	ftest_assert_int_eq(c.status, 0);
	nothing_within(fb, QUIET_MS);
	/* The group is removed while its lease runs: the CPU is the node's once it ends. */
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_RETURN, 9, pg, 0, 0), 0);
	nothing_within(fb, QUIET_MS);
	return_lease(&f, fa, c.lease_id);
	read_grant(fb, 21, &b);
	ftest_assert_int_eq(b.status, 0);
	request_lease_in(&f, fa, 13, job, pg, 0);
	read_grant(fa, 13, &a);
	ftest_assert_int_eq(a.status, -ENOENT);
	close(fa);
	close(fb);
	fx_stop(&f);
}

FTEST(bundles_go_with_their_owner_and_uncommitted_ones_expire)
{
	struct fx f;
	uint8_t job[16], pg[16];
	struct grant a;
	int fa, fb;

	fx_start(&f, 1, 2, "2");
	ferry_id_random(job, sizeof(job));
	ferry_id_random(pg, sizeof(pg));
	fa = driver_connect(&f);
	fb = driver_connect(&f);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_PREPARE, 1, pg, 0, 2.0), 0);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_COMMIT, 2, pg, 0, 0), 0);
	request_lease_in(&f, fb, 1, job, NULL, 0);
	nothing_within(fb, QUIET_MS);
	close(fa); /* the owner is gone: so is its group */
	read_grant(fb, 1, &a);
	ftest_assert_int_eq(a.status, 0);
	return_lease(&f, fb, a.lease_id);
	/* Prepared, never committed: the node releases it at its deadline (its coordinator
	 * died or gave up), though the connection stays. */
	fa = driver_connect(&f);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_PREPARE, 3, pg, 0, 2.0), 0);
	request_lease_in(&f, fb, 2, job, NULL, 0);
	nothing_within(fb, QUIET_MS);
	read_grant(fb, 2, &a); /* within WAIT_MS, after the 5 s deadline */
	ftest_assert_int_eq(a.status, 0);
	ftest_assert_int_eq(bundle_do(&f, fa, FERRY__WIRE_MSG_BUNDLE_COMMIT, 4, pg, 0, 0), -ENOENT);
	close(fa);
	close(fb);
	fx_stop(&f);
}

/* A put of 1 MiB owned by @owner into @c's store; its ID. */
static struct ferry_object_id put_owned_by(struct ferry_plasma_client *c,
					   const struct ferry_worker_id *owner)
{
	static char data[1 << 20];
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	ftest_assert_ok(
		ferry_plasma_client_put_owned(c, &id, data, sizeof(data), NULL, 0, 0, owner));
	return id;
}

FTEST(objects_free_deletes_only_the_senders_objects)
{
	struct ferry_worker_id me, other;
	struct ferry_object_id ids[4];
	struct ferry_plasma_client *c;
	struct ferry_plasma_view v;
	struct fx f;
	int fd, status, i;

	fx_start(&f, 0, 1, "1");
	fd = driver_connect_ex(&f, FERRY_WIRE_PROTOCOL_VERSION, (int32_t)getpid(), &status, &me);
	ftest_assert_int_eq(status, 0);
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(f.node), NULL, &c));
	ferry_id_random(other.bytes, sizeof(other.bytes));
	ids[0] = put_owned_by(c, &me);
	ids[1] = put_owned_by(c, &other);
	ids[2] = put_owned_by(c, &me);	 /* pinned below: goes at its release */
	ferry_object_id_random(&ids[3]); /* never in the store */
	ftest_assert_ok(ferry_plasma_client_get(c, &ids[2], 1, 0, &v));
	ftest_assert_ok(
		rtp_send(fd, &f.fb, FERRY__WIRE_MSG_OBJECTS_FREE,
			 ferry__wire_objects_free_build(
				 &f.fb, &(struct ferry__wire_objects_free){
						.object_ids = ids, .object_ids_count = 4})));
	for (i = 0; i < (int)WAIT_MS / 10 && ferry_plasma_client_contains(c, &ids[0]); i++)
		usleep(10 * 1000);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &ids[0]), 0);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &ids[1]), 1); /* another owner's */
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
	for (i = 0; i < (int)WAIT_MS / 10 && ferry_plasma_client_contains(c, &ids[2]); i++)
		usleep(10 * 1000);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &ids[2]), 0);
	/* No reply (ObjectsFree has none), and the sender's connection stays open. */
	nothing_within(fd, QUIET_MS);
	ferry_plasma_client_disconnect(c);
	close(fd);
	fx_stop(&f);
}
