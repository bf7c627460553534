/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the transport integration tests (see transport_util.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plasma/store.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"
#include "tests/integration/transport/transport_util.h"
#include "transport/objmgr_int.h"

static const char *token_file(void)
{
	return itest_token_file(TT_TOKEN);
}

struct tt_proc tt_gcs_start(void)
{
	const char *bin = getenv("FERRY_GCS_BIN");
	struct tt_proc p = {0};
	char line[256];

	if (!bin)
		ftest_skip("FERRY_GCS_BIN not set");
	{
		/* FERRY_TEST_NODE_DEADLINE_MS: a longer heartbeat deadline where everything is
		 * slow (soft-RoCE under TCG, sanitizers) and node death is not what is tested. */
		const char *deadline = getenv("FERRY_TEST_NODE_DEADLINE_MS");
		const char *argv[] = {bin,	    "--port",
				      "0",	    "--token-file",
				      token_file(), deadline ? "--node-deadline-ms" : NULL,
				      deadline,	    NULL};

		p.pid = itest_spawn(argv, line, sizeof(line));
	}
	if (sscanf(line, "ferry-gcs listening on port %hu", &p.port) != 1)
		ftest_assert_true(!"ferry-gcs did not start");
	return p;
}

struct tt_proc tt_node_proc_start(uint16_t gcs_port, const char *memory, const char *name)
{
	return tt_node_proc_start_ex(gcs_port, memory, name, "tcp", "127.0.0.1");
}

/* --objmgr-loop for a node: @flag, else FERRY_TEST_OBJMGR_LOOP (meson.build's *_own_loop
 * tests), else NULL (the default). */
static const char *objmgr_loop_flag(const char *flag)
{
	const char *env = getenv("FERRY_TEST_OBJMGR_LOOP");

	return flag ? flag : env && *env ? env : NULL;
}

static enum ferry__node_objmgr_loop objmgr_loop_opt(const char *flag)
{
	const char *f = objmgr_loop_flag(flag);

	if (f && !strcmp(f, "own"))
		return FERRY__NODE_OBJMGR_LOOP_OWN;
	if (f && !strcmp(f, "node"))
		return FERRY__NODE_OBJMGR_LOOP_NODE;
	return FERRY__NODE_OBJMGR_LOOP_AUTO;
}

struct tt_proc tt_node_proc_start_ex(uint16_t gcs_port, const char *memory, const char *name,
				     const char *transport, const char *ip)
{
	const char *bin = getenv("FERRY_NODE_BIN");
	struct tt_proc p = {0};
	char gcs[64], line[512];
	char *at;

	if (!bin)
		ftest_skip("FERRY_NODE_BIN not set");
	snprintf(gcs, sizeof(gcs), "127.0.0.1:%u", gcs_port);
	snprintf(p.socket, sizeof(p.socket), "%s/%s.sock", ftest_tmpdir(), name);
	{
		const char *argv[] = {
			bin,	"--gcs",    gcs,      "--token-file", token_file(), "--memory",
			memory, "--socket", p.socket, "--transport",  transport,    "--ip",
			ip,	NULL,	    NULL,     NULL,	      NULL,	    NULL};
		int n = 13;

		if (tt_node_spill_dir) {
			argv[n++] = "--spill-dir";
			argv[n++] = tt_node_spill_dir;
		}
		if (objmgr_loop_flag(tt_node_objmgr_loop)) {
			argv[n++] = "--objmgr-loop";
			argv[n++] = objmgr_loop_flag(tt_node_objmgr_loop);
		}

		p.pid = itest_spawn(argv, line, sizeof(line));
	}
	at = strstr(line, "address=");
	ftest_assert_ptr_notnull(at);
	sscanf(at, "address=%255s", p.address);
	return p;
}

/* Whether thread @tid of @pid is stopped (or gone). */
static bool thread_stopped(pid_t pid, const char *tid)
{
	char path[96], buf[256];
	const char *state;
	size_t n;
	FILE *f;

	if ((size_t)snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, tid) >=
	    sizeof(path))
		return true;
	f = fopen(path, "re");
	if (!f)
		return true;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	state = strrchr(buf, ')'); /* "tid (comm) S ..." */
	return state && (state[2] == 'T' || state[2] == 't');
}

/*
 * Wait (10 s at most) until every thread of @pid is stopped. kill(SIGSTOP) returns before any
 * is, and the group stop begins only when the thread the signal woke runs: on a loaded
 * machine the node's loop thread can answer a pull meanwhile.
 */
static void wait_stopped(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	for (int i = 0; i < 2000; i++) {
		DIR *d = opendir(path);
		struct dirent *e;
		bool all = d != NULL;

		while (d && (e = readdir(d)))
			if (e->d_name[0] != '.' && !thread_stopped(pid, e->d_name))
				all = false;
		if (d)
			closedir(d);
		if (all)
			return;
		usleep(5 * 1000);
	}
	ftest_assert_true(!"the node process never stopped");
}

void tt_proc_signal(struct tt_proc *p, int sig)
{
	int status;

	kill(p->pid, sig);
	if (sig == SIGSTOP)
		wait_stopped(p->pid);
	if (sig == SIGTERM || sig == SIGKILL) {
		ftest_assert_int_eq(waitpid(p->pid, &status, 0), p->pid);
		if (sig == SIGTERM)
			ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		p->pid = 0;
	}
}

struct ferry__node *tt_node_start(uint16_t gcs_port, unsigned memory_mib, bool no_shm,
				  uint32_t timeout_ms)
{
	return tt_node_start_ex(gcs_port, memory_mib, no_shm, timeout_ms, FERRY__NODE_TRANSPORT_TCP,
				NULL);
}

uint32_t tt_node_spin_us;
uint32_t tt_node_copy_batch_us;
uint32_t tt_node_notice_hold_ms;
const char *tt_node_spill_dir;
const char *tt_node_objmgr_loop;

struct ferry__node *tt_node_start_ex(uint16_t gcs_port, unsigned memory_mib, bool no_shm,
				     uint32_t timeout_ms, enum ferry__node_transport transport,
				     const char *ip)
{
	static unsigned counter;
	struct ferry__node_opts o = {0};
	struct ferry__node *node = NULL;
	char gcs[64], sock[256];

	snprintf(gcs, sizeof(gcs), "127.0.0.1:%u", gcs_port);
	snprintf(sock, sizeof(sock), "%s/node%u.sock", ftest_tmpdir(), counter++);
	o.gcs_address = gcs;
	o.token = TT_TOKEN;
	o.token_len = strlen(TT_TOKEN);
	o.memory_bytes = (uint64_t)memory_mib << 20;
	o.transport = transport;
	o.ip = ip;
	o.no_shm = no_shm;
	o.socket_path = sock;
	o.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT;
	o.pull_timeout_ms = timeout_ms;
	o.spin_us = tt_node_spin_us;
	o.copy_batch_us = tt_node_copy_batch_us;
	o.notice_hold_ms = tt_node_notice_hold_ms;
	o.spill_dir = tt_node_spill_dir;
	o.objmgr_loop = objmgr_loop_opt(tt_node_objmgr_loop);
	ftest_assert_ok(ferry__node_start(&o, &node));
	return node;
}

struct ferry_gcs_client *tt_gcs_client(uint16_t gcs_port)
{
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c = NULL;
	char addr[64];
	const char *list[1] = {addr};

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", gcs_port);
	o.addresses = list;
	o.naddresses = 1;
	o.token = TT_TOKEN;
	o.token_len = strlen(TT_TOKEN);
	ftest_assert_ok(ferry_gcs_client_connect(&o, &c));
	return c;
}

struct tt_cluster tt_cluster_start(unsigned nodes, unsigned memory_mib, bool no_shm,
				   uint32_t timeout_ms)
{
	return tt_cluster_start_ex(nodes, memory_mib, no_shm, timeout_ms, FERRY__NODE_TRANSPORT_TCP,
				   NULL);
}

struct tt_cluster tt_cluster_start_ex(unsigned nodes, unsigned memory_mib, bool no_shm,
				      uint32_t timeout_ms, enum ferry__node_transport transport,
				      const char *ip)
{
	struct tt_cluster t = {.no_shm = no_shm, .transport = transport, .ip = ip};

	t.gcs = tt_gcs_start();
	for (unsigned i = 0; i < nodes; i++)
		tt_cluster_add(&t, memory_mib, timeout_ms);
	return t;
}

struct ferry__node *tt_cluster_add(struct tt_cluster *t, unsigned memory_mib, uint32_t timeout_ms)
{
	ftest_assert_uint_lt(t->count, TT_MAX_NODES);
	t->node[t->count] = tt_node_start_ex(t->gcs.port, memory_mib, t->no_shm, timeout_ms,
					     t->transport, t->ip);
	return t->node[t->count++];
}

struct ferry_gcs_client *tt_cluster_client(struct tt_cluster *t)
{
	ftest_assert_ptr_null(t->c);
	t->c = tt_gcs_client(t->gcs.port);
	return t->c;
}

void tt_cluster_stop_node(struct tt_cluster *t, struct ferry__node *n)
{
	for (unsigned i = 0; i < t->count; i++) {
		if (n && t->node[i] == n) {
			ferry__node_stop(n);
			t->node[i] = NULL;
			return;
		}
	}
	ftest_assert_true(!"not a running node of the cluster");
}

void tt_cluster_stop(struct tt_cluster *t)
{
	ferry_gcs_client_destroy(t->c);
	t->c = NULL;
	for (unsigned i = t->count; i-- > 0;) {
		if (t->node[i])
			ferry__node_stop(t->node[i]);
		t->node[i] = NULL;
	}
	t->count = 0;
	tt_proc_signal(&t->gcs, SIGTERM);
}

void tt_put(const char *socket, const struct ferry_object_id *id, uint64_t size, uint64_t seed)
{
	struct ferry_plasma_client *c = NULL;
	uint8_t *data;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_create(c, id, size, "md!", 3, (void **)&data));
	for (uint64_t i = 0; i < size; i++)
		data[i] = tt_byte(seed, i);
	ftest_assert_ok(ferry_plasma_client_seal(c, id));
	ferry_plasma_client_disconnect(c);
}

void tt_check(const char *socket, const struct ferry_object_id *id, uint64_t size, uint64_t seed)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_view v;
	const uint8_t *d;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_get(c, id, 1, 0, &v));
	ftest_assert_uint_eq(v.data_size, size);
	ftest_assert_uint_eq(v.metadata_size, 3);
	ftest_assert_mem_eq(v.metadata, "md!", 3);
	d = v.data;
	for (uint64_t i = 0; i < size; i++)
		if (d[i] != tt_byte(seed, i))
			ftest_assert_uint_eq(d[i], tt_byte(seed, i));
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
	ferry_plasma_client_disconnect(c);
}

int tt_present(const char *socket, const struct ferry_object_id *id)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_object_info *objs = NULL;
	size_t n = 0;
	int found = 0;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_list(c, true, &objs, &n));
	for (size_t i = 0; i < n; i++)
		found |= ferry_object_id_eq(&objs[i].id, id);
	ferry_plasma_list_free(objs);
	ferry_plasma_client_disconnect(c);
	return found;
}

bool tt_listed(struct ferry_gcs_client *c, const struct ferry_object_id *id,
	       const struct ferry_node_id *node, uint32_t nloc, unsigned ms)
{
	for (unsigned t = 0;; t += 5) {
		struct ferry_gcs_object_info info;
		bool ok = false;

		if (ferry_gcs_object_lookup(c, id, &info) == 0) {
			ok = info.nlocations >= nloc;
			if (ok && node) {
				ok = false;
				for (uint32_t i = 0; i < info.nlocations; i++)
					ok |= ferry_node_id_eq(&info.locations[i], node);
			}
			ferry_gcs_free(info.locations);
		}
		if (ok)
			return true;
		if (t >= ms)
			return false;
		usleep(5 * 1000);
	}
}

void tt_wait_location(struct ferry_gcs_client *c, const struct ferry_object_id *id, uint32_t nloc)
{
	if (!tt_listed(c, id, NULL, nloc, 10000))
		ftest_assert_true(!"the object never reached the directory");
}

static const char *transport_name(unsigned t)
{
	return t == FERRY_GCS_TRANSPORT_TCP ? "tcp" : t == FERRY_GCS_TRANSPORT_SHM ? "shm" : "rdma";
}

void tt_move_sizes(uint16_t gcs_port, struct ferry__node *a, struct ferry__node *b,
		   unsigned want_transport)
{
	static const uint64_t sizes[] = {0, 1, 4096, 1u << 20, 64u << 20};
	struct ferry_object_id ids[5];
	struct ferry__objmgr_result res;
	struct ferry_gcs_client *c;

	for (size_t i = 0; i < 5; i++) {
		ferry_object_id_random(&ids[i]);
		tt_put(ferry__node_socket(a), &ids[i], sizes[i], i);
	}
	ftest_assert_ok(ferry__node_sync(a));
	for (size_t i = 0; i < 5; i++) {
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &ids[i], &res));
		ftest_assert_uint_eq(res.transport, want_transport);
		ftest_assert_true(ferry_node_id_eq(&res.source, ferry__node_id(a)));
		ftest_assert_uint_eq(res.bytes, sizes[i] + 3);
		tt_check(ferry__node_socket(b), &ids[i], sizes[i], i);
		ftest_log("%llu bytes over %s in %llu us", (unsigned long long)sizes[i],
			  transport_name(want_transport), (unsigned long long)res.micros);
	}
	/* A second pull finds it local; the pulled copy is in the directory. */
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &ids[3], &res));
	ftest_assert_uint_eq(res.transport, 0);
	c = tt_gcs_client(gcs_port);
	tt_wait_location(c, &ids[3], 2);
	ferry_gcs_client_destroy(c);
}

static void *killer_main(void *arg)
{
	struct tt_killer *k = arg;
	struct ferry__objmgr_stats st;

	for (int i = 0; i < 200000; i++) { /* 40 s at most: a hang guard */
		ferry__objmgr_get_stats(k->watch, &st);
		if (k->served ? st.requests_served > 0
			      : st.bytes_in_flight > 0 || st.pulls_ok + st.pulls_failed > 0)
			break;
		usleep(200);
	}
	usleep(k->delay_ms * 1000u);
	kill(k->victim, SIGKILL);
	return NULL;
}

void tt_killer_start(struct tt_killer *k)
{
	ftest_assert_ok(pthread_create(&k->thread, NULL, killer_main, k));
}

void tt_killer_join(struct tt_killer *k)
{
	int status;

	pthread_join(k->thread, NULL);
	waitpid(k->victim, &status, 0);
}

/* One of tt_pull_concurrently()'s threads. */
struct puller {
	struct ferry__objmgr *om;	 /* where */
	struct ferry_object_id id;	 /* what */
	struct ferry__objmgr_result res; /* how it went */
	pthread_t thread;		 /* the thread */
};

static void *puller_main(void *arg)
{
	struct puller *p = arg;

	(void)ferry__objmgr_pull_wait(p->om, &p->id, &p->res);
	return NULL;
}

void tt_pull_concurrently(struct ferry__objmgr *om, const struct ferry_object_id *id,
			  unsigned nthreads)
{
	struct puller p[TT_MAX_PULLERS];

	ftest_assert_uint_le(nthreads, TT_MAX_PULLERS);
	for (unsigned i = 0; i < nthreads; i++) {
		p[i].om = om;
		p[i].id = *id;
		ftest_assert_ok(pthread_create(&p[i].thread, NULL, puller_main, &p[i]));
	}
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(p[i].thread, NULL);
		ftest_assert_ok(p[i].res.status);
	}
}

void tt_check_killed_pull(int ret, struct ferry__node *puller, const struct ferry_object_id *id,
			  uint64_t size, uint64_t seed)
{
	ftest_log("pull with its source killed: %s", ret ? ferry_strerror(-ret) : "finished first");
	if (ret == 0) {
		tt_check(ferry__node_socket(puller), id, size, seed);
	} else {
		ftest_assert_errno(ret, -ECONNRESET);
		ftest_assert_int_eq(tt_present(ferry__node_socket(puller), id), 0);
	}
}

void tt_warm_cache(struct ferry__objmgr *om, const char *src_socket, struct ferry_gcs_client *c)
{
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	tt_put(src_socket, &id, 16, 99);
	tt_wait_location(c, &id, 1);
	ftest_assert_ok(ferry__objmgr_pull_wait(om, &id, NULL));
}

void tt_wait_cached(struct ferry__objmgr *om, const struct ferry_object_id *id, uint32_t n,
		    struct ferry_node_id *out)
{
	ferry__objmgr_locs_follow(om, id); /* the cache holds only the objects it follows */
	for (int i = 0; i < 2000; i++) {
		if (ferry__objmgr_locs_get(om, id, out, NULL, NULL) >= n)
			return;
		usleep(5 * 1000);
	}
	ftest_assert_true(!"the location cache never listed the object");
}

struct ferry__objmgr_stats tt_stats(struct ferry__node *n)
{
	struct ferry__objmgr_stats st;

	ferry__objmgr_get_stats(ferry__node_objmgr(n), &st);
	return st;
}

struct tt_pulled tt_pull_cached(struct ferry_gcs_client *c, struct ferry__node *a,
				struct ferry__node *b, const struct ferry_object_id *id)
{
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct tt_pulled pl;

	tt_wait_location(c, id, 1);
	tt_wait_cached(ferry__node_objmgr(b), id, 1, locs);
	pl.a0 = tt_stats(a), pl.b0 = tt_stats(b);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), id, &pl.res));
	pl.a1 = tt_stats(a), pl.b1 = tt_stats(b);
	return pl;
}
