/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry_init joining a cluster that `ferry start --head` runs on this host (a GCS and a node as
 * daemons, in the test's own FERRY_RUN_DIR): by "auto" and by the GCS's "host:port", the node
 * found in the GCS's nodes table, also when it advertises a non-loopback address of this host.
 * The driver's job is in the GCS's jobs table; put and get go through that node's store; with
 * no cluster there, "auto" fails with -ENOENT and says why, as do a GCS with no node on this
 * host and a GCS that does not answer. On a host of two nodes, FERRY_NODE or opts.node picks
 * one (an ID's prefix, a store socket); a name of neither fails listing them. The job's code
 * in the GCS: a library removed from its path before the first submit still runs (the node
 * fetches it by hash), a corrupted cache copy is fetched again, and a hash the GCS does not
 * have fails the task with -ENOENT naming it.
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_GCS_BIN, FERRY_WORKER_EXE,
 * FERRY_TEST_JOB (job_owner's library: add).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "common/net.h"
#include "common/sha256.h"
#include "node/rt_code.h"
#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

static char run_dir[256];

__attribute__((format(printf, 1, 2))) static int cli(const char *fmt, ...)
{
	const char *bin = getenv("FERRY_CLI_BIN");
	char args[512], cmd[1024], out[8192];
	va_list ap;
	int code;

	if (!bin || !getenv("FERRY_NODE_BIN"))
		ftest_skip("FERRY_CLI_BIN / FERRY_NODE_BIN not set (run through meson test)");
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "FERRY_RUN_DIR='%s' '%s' %s 2>&1", run_dir, bin, args);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ ferry %s -> %d\n%s", args, code, out);
	return code;
}

static void start_head_on(const char *ip)
{
	snprintf(run_dir, sizeof(run_dir), "%s/run", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	unsetenv("FERRY_TOKEN_FILE");
	ftest_assert_int_eq(cli("start --head --port 0 --ip %s --memory 64M --timeout 20", ip), 0);
}

static void start_head(void)
{
	start_head_on("127.0.0.1");
}

static void put_get_and_job(void)
{
	struct ferry_gcs_job_info *jobs = NULL;
	struct ferry_ref r;
	struct ferry_view v;
	int n, found = 0;

	ftest_assert_ok(ferry_put("joined", 6, &r));
	ftest_assert_ok(ferry_get(&r, 5000, &v));
	ftest_assert_mem_eq(v.data, "joined", 6);
	ferry_release(&v);
	ferry_ref_drop(&r);
	n = ferry_gcs_job_list(ferry__rt.gcs, &jobs);
	ftest_assert_int_gt(n, 0);
	for (int i = 0; i < n; i++)
		found += ferry_job_id_eq(&jobs[i].id, &ferry__rt.job) &&
			 jobs[i].state == FERRY_GCS_JOB_RUNNING;
	ferry_gcs_free(jobs);
	ftest_assert_int_eq(found, 1);
}

FTEST(init_auto_joins_the_cluster_ferry_start_runs)
{
	struct ferry_init_opts o = {.address = "auto"};

	start_head();
	ftest_assert_ok(ferry_init(&o));
	ftest_assert_true(strstr(ferry__rt.store_socket, run_dir) == ferry__rt.store_socket);
	put_get_and_job();
	ferry_shutdown();
	cli("stop --timeout 5");
}

FTEST(init_by_gcs_address_joins_through_this_host_s_node)
{
	struct ferry_init_opts o = {0};
	char addr[256];

	start_head();
	itest_cluster_address(run_dir, addr, sizeof(addr));
	setenv("FERRY_ADDRESS", addr, 1); /* the environment's address, as a user sets it */
	ftest_assert_ok(ferry_init(&o));
	put_get_and_job();
	ferry_shutdown();
	cli("stop --timeout 5");
}

FTEST(init_auto_with_no_cluster_is_enoent)
{
	struct ferry_init_opts o = {.address = "auto"};

	snprintf(run_dir, sizeof(run_dir), "%s/none", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	ftest_log_capture_start();
	ftest_assert_errno(ferry_init(&o), -ENOENT);
	ftest_log_capture_stop();
	ftest_assert_true(strstr(ftest_log_captured(), "no cluster started from") != NULL);
}

/* A non-loopback address of this host that is up, or NULL. */
static const char *host_ip(void)
{
	static struct ferry__net_iface ifs[64];
	int n = ferry__net_ifaces("/sys", ifs, 64);

	for (int i = 0; i < n; i++)
		if (ifs[i].up && !ifs[i].loopback && ifs[i].family == AF_INET)
			return ifs[i].ip;
	return NULL;
}

FTEST(init_by_host_address_finds_the_node_advertising_it)
{
	const char *ip = host_ip();
	struct ferry_init_opts o = {0};
	char addr[256];

	if (!ip)
		ftest_skip("this host has no non-loopback IPv4 address that is up");
	start_head_on(ip);
	itest_cluster_address(run_dir, addr, sizeof(addr));
	ftest_log("GCS %s, node on %s", addr, ip);
	o.address = addr;
	ftest_assert_ok(ferry_init(&o));
	ftest_assert_false(ferry_id_is_nil(&ferry__rt.node, sizeof(ferry__rt.node)));
	put_get_and_job();
	ferry_shutdown();
	cli("stop --timeout 5");
}

FTEST(init_by_address_without_a_node_on_this_host_is_enoent)
{
	const char *gcs = getenv("FERRY_GCS_BIN");
	const char *token = itest_token_file("no-node-here-token");
	struct ferry_init_opts o = {0};
	char line[256], addr[64];
	unsigned port = 0;
	pid_t g;

	if (!gcs)
		ftest_skip("FERRY_GCS_BIN not set (run through meson test)");
	snprintf(run_dir, sizeof(run_dir), "%s/none", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	setenv("FERRY_TOKEN_FILE", token, 1);
	g = itest_spawn((const char *const[]){gcs, "--port", "0", "--token-file", token, NULL},
			line, sizeof(line));
	ftest_assert_int_eq(sscanf(line, "ferry-gcs listening on port %u", &port), 1);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	o.address = addr;
	ftest_log_capture_start();
	ftest_assert_errno(ferry_init(&o), -ENOENT);
	ftest_log_capture_stop();
	ftest_assert_true(strstr(ftest_log_captured(), "no node of the cluster at") != NULL);
	kill(g, SIGTERM);
	waitpid(g, NULL, 0);
}

FTEST(init_by_address_of_a_gcs_that_does_not_answer_says_so)
{
	struct ferry_init_opts o = {.address = "127.0.0.1:1"};
	int ret;

	setenv("FERRY_TOKEN_FILE", itest_token_file("nobody-token"), 1);
	ftest_log_capture_start();
	ret = ferry_init(&o);
	ftest_log_capture_stop();
	ftest_assert_int_lt(ret, 0);
	ftest_assert_true(strstr(ftest_log_captured(), "cannot reach the GCS at 127.0.0.1:1") !=
			  NULL);
}

/* ---- a host that runs two nodes ---- */

/* The head (node-1) and a second node of its cluster on this host (node-2). */
static void start_two_nodes(void)
{
	char addr[256];

	start_head();
	itest_cluster_address(run_dir, addr, sizeof(addr));
	ftest_assert_int_eq(cli("start --address %s --token-file %s/token --ip 127.0.0.1 "
				"--memory 64M --timeout 20",
				addr, run_dir),
			    0);
}

/* Node-@index's ID in hex, as `ferry start` recorded it from the node's ready line. */
static void node_hex(int index, char hex[64])
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/node-%d/node.id", run_dir, index);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	ftest_assert_ptr_notnull(fgets(hex, 64, f));
	fclose(f);
	hex[strcspn(hex, "\n")] = '\0';
	ftest_assert_uint_eq(strlen(hex), 32);
}

static void assert_joined(const char *hex)
{
	char got[64];

	ferry_id_to_hex(&ferry__rt.node, sizeof(ferry__rt.node), got, sizeof(got));
	ftest_assert_str_eq(got, hex);
}

/* FERRY_ADDRESS=auto on a host of two nodes: either may be chosen, by $FERRY_NODE or
 * ferry_init_opts.node (an ID's prefix as `ferry status` shows it, a store socket, or node-N as
 * `ferry start` names it); without one the driver joins one and says which and how to choose;
 * a name of no node here, or a prefix of both, fails naming both. */
FTEST(init_on_a_host_of_two_nodes_joins_the_one_named)
{
	struct ferry_init_opts o = {.address = "auto"};
	char id1[64], id2[64], prefix[13], sock[512];
	size_t common = 0;

	start_two_nodes();
	node_hex(1, id1);
	node_hex(2, id2);
	unsetenv("FERRY_NODE");
	ftest_log_capture_start();
	ftest_assert_ok(ferry_init(&o));
	ftest_log_capture_stop();
	ftest_assert_true(strstr(ftest_log_captured(), "2 nodes of the cluster run on this host") !=
			  NULL);
	ftest_assert_true(strstr(ftest_log_captured(), "FERRY_NODE") != NULL);
	ferry_shutdown();

	/* $FERRY_NODE: node-2 by the 12 digits `ferry status` shows, in capitals as well. */
	snprintf(prefix, sizeof(prefix), "%.12s", id2);
	for (char *p = prefix; *p; p++)
		*p = (char)(*p >= 'a' && *p <= 'f' ? *p - 'a' + 'A' : *p);
	setenv("FERRY_NODE", prefix, 1);
	ftest_assert_ok(ferry_init(&o));
	assert_joined(id2);
	put_get_and_job();
	ferry_shutdown();

	/* By the name `ferry start` printed for it (its directory in the run directory). */
	setenv("FERRY_NODE", "node-2", 1);
	ftest_assert_ok(ferry_init(&o));
	assert_joined(id2);
	ferry_shutdown();
	setenv("FERRY_NODE", "node-1", 1);
	ftest_assert_ok(ferry_init(&o));
	assert_joined(id1);
	ferry_shutdown();
	setenv("FERRY_NODE", prefix, 1);

	/* opts.node comes before $FERRY_NODE: node-1 by its store socket. */
	snprintf(sock, sizeof(sock), "%s/node-1/store.sock", run_dir);
	o.node = sock;
	ftest_assert_ok(ferry_init(&o));
	assert_joined(id1);
	ferry_shutdown();

	/* No such node here: -ENOENT, naming the candidates. */
	o.node = "node-3";
	ftest_assert_errno(ferry_init(&o), -ENOENT);
	o.node = "0123456789abcdef0123456789abcdef0";
	ftest_log_capture_start();
	ftest_assert_errno(ferry_init(&o), -ENOENT);
	ftest_log_capture_stop();
	ftest_assert_true(strstr(ftest_log_captured(), "matches no live node") != NULL);
	ftest_assert_true(strstr(ftest_log_captured(), id1) != NULL);
	ftest_assert_true(strstr(ftest_log_captured(), id2) != NULL);

	/* A prefix of both IDs (when they share one: they are random): -EINVAL. */
	while (id1[common] == id2[common])
		common++;
	if (common) {
		snprintf(prefix, sizeof(prefix), "%.*s", (int)common, id1);
		o.node = prefix;
		ftest_log_capture_start();
		ftest_assert_errno(ferry_init(&o), -EINVAL);
		ftest_log_capture_stop();
		ftest_assert_true(strstr(ftest_log_captured(), "ambiguous") != NULL);
	} else {
		ftest_log("the two IDs share no first digit: no ambiguous prefix to try");
	}
	unsetenv("FERRY_NODE");
	cli("stop --timeout 5");
}

/* ---- the job's code in the GCS ---- */

/* FERRY_TEST_JOB copied to @dst (the driver names the copy, then removes it). */
static void copy_job(const char *dst)
{
	const char *src = getenv("FERRY_TEST_JOB");
	char cmd[1024], out[256];

	if (!src || !getenv("FERRY_WORKER_EXE"))
		ftest_skip("FERRY_TEST_JOB / FERRY_WORKER_EXE not set (run through meson test)");
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, dst);
	ftest_assert_int_eq(itest_popen_read(cmd, out, sizeof(out)), 0);
}

/* A job whose library is gone from its path by its first submit. */
static void init_with_vanished_code(const char *name)
{
	struct ferry_init_opts o = {.address = "auto"};
	char lib[512];

	snprintf(lib, sizeof(lib), "%s/%s", ftest_tmpdir(), name);
	copy_job(lib);
	o.code_path = lib;
	ftest_assert_ok(ferry_init(&o));
	ftest_assert_int_eq(unlink(lib), 0);
}

static int get_add(int64_t a, int64_t b, int64_t *sum, char *error, size_t size)
{
	struct ferry_arg args[2] = {{.data = &a, .len = sizeof(a)}, {.data = &b, .len = sizeof(b)}};
	struct ferry_ref r;
	struct ferry_view v;
	int ret;

	ftest_assert_ok(ferry_submit("add", args, 2, NULL, &r));
	ret = ferry_get(&r, 30000, &v);
	if (ret == 0) {
		ftest_assert_uint_eq(v.len, sizeof(*sum));
		memcpy(sum, v.data, sizeof(*sum));
		ferry_release(&v);
	} else {
		snprintf(error, size, "%s", v.error);
		ftest_log("get: %s: %s", ferry_strerror(ret), v.error);
	}
	ferry_ref_drop(&r);
	return ret;
}

/* The node's cached copy of the job's code: "<store socket>.code/<hex>.so". */
static void cache_path(char *out, size_t size, char *hex)
{
	ferry_id_to_hex(ferry__rt.code_hash, sizeof(ferry__rt.code_hash), hex, 65);
	snprintf(out, size, "%s.code/%s.so", ferry__rt.store_socket, hex);
}

static bool file_hash_is(const char *path, const uint8_t *want)
{
	uint8_t got[FERRY_SHA256_SIZE];
	int fd = open(path, O_RDONLY), ret;

	if (fd < 0)
		return false;
	ret = ferry__sha256_fd(fd, got);
	close(fd);
	return ret == 0 && !memcmp(got, want, sizeof(got));
}

FTEST(code_gone_from_its_path_is_fetched_from_the_gcs_and_a_bad_copy_again)
{
	char cache[1024], hex[65], err[256];
	uint8_t hash[FERRY_SHA256_SIZE];
	int64_t sum = 0;
	int fd;

	start_head();
	init_with_vanished_code("job-a.so");
	ftest_assert_ok(get_add(2, 3, &sum, err, sizeof(err)));
	ftest_assert_int_eq(sum, 5);
	cache_path(cache, sizeof(cache), hex);
	memcpy(hash, ferry__rt.code_hash, sizeof(hash));
	ftest_assert_true(file_hash_is(cache, hash));
	ferry_shutdown();

	/* Corrupt the node's copy: the next job's worker refuses it, the node fetches it again. */
	fd = open(cache, O_WRONLY);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(pwrite(fd, "garbage", 7, 64), 7);
	close(fd);
	ftest_assert_false(file_hash_is(cache, hash));
	init_with_vanished_code("job-b.so");
	ftest_assert_ok(get_add(20, 22, &sum, err, sizeof(err)));
	ftest_assert_int_eq(sum, 42);
	ftest_assert_true(file_hash_is(cache, hash));
	ferry_shutdown();
	/* Nothing of the node is left: its cache, and the socket of the worker it killed. */
	ftest_assert_int_eq(cli("stop --timeout 5"), 0);
	snprintf(cache, sizeof(cache), "%s/node-1", run_dir);
	ftest_assert_int_eq(access(cache, F_OK), -1);
}

FTEST(code_the_gcs_does_not_have_fails_the_task_with_enoent_naming_it)
{
	char hex[65], cache[1024], err[256] = "", key[FERRY__CODE_KEY_MAX];
	int64_t sum;

	start_head();
	init_with_vanished_code("job-c.so");
	cache_path(cache, sizeof(cache), hex);
	/* As if the GCS never had it: its marker removed (chunks without one are not trusted). */
	snprintf(key, sizeof(key), "%s", hex);
	ftest_assert_int_eq(ferry_gcs_kv_delete(ferry__rt.gcs, FERRY__CODE_NS,
						strlen(FERRY__CODE_NS), key, strlen(key)),
			    1);
	ftest_assert_errno(get_add(1, 1, &sum, err, sizeof(err)), -ENOENT);
	ftest_assert_true(strstr(err, hex) != NULL);
	ftest_assert_true(strstr(err, "node ") != NULL);
	ferry_shutdown();
	cli("stop --timeout 5");
}
