/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local cluster of cluster/cluster.h (what ferry_init will start): a put through its store
 * socket reaches the object directory of its GCS, and a stop leaves nothing behind (no thread,
 * no fd, no file under the run directory); bad options fail with -errno and leave nothing
 * either.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "cluster/cluster.h"
#include "cluster/embed.h"
#include "common/util.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

/* A hang guard for the directory to list a put, far above any honest wait. */
#define LISTED_WAIT_MS 20000

/* This process's threads (after TSan's own one is up: procs.h). */
static int count_threads(void)
{
	itest_sanitizer_thread_start();
	return ftest_count_entries("/proc/self/task");
}

static int count_fds(void)
{
	return ftest_count_entries("/proc/self/fd") - 1;
}

/* Wait until threads and fds are back to @threads and @fds: a stop joins its threads, but a
 * thread's exit may lag its join's return by a moment in /proc. The guard only ends a hang. */
static void expect_back_to(int threads, int fds)
{
	uint64_t deadline = ferry__now_ms() + LISTED_WAIT_MS;

	while ((count_threads() != threads || count_fds() != fds) && ferry__now_ms() < deadline)
		usleep(1000);
	ftest_assert_int_eq(count_threads(), threads);
	ftest_assert_int_eq(count_fds(), fds);
}

/* Whether the directory of the GCS at @c lists @node as a location of @id. */
static int listed(struct ferry_gcs_client *gcs, const struct ferry_object_id *id,
		  const struct ferry_node_id *node)
{
	struct ferry_gcs_object_info info;
	int ret = ferry_gcs_object_lookup(gcs, id, &info), found = 0;

	if (ret == -ENOENT)
		return 0;
	ftest_assert_ok(ret);
	for (uint32_t i = 0; i < info.nlocations; i++)
		found |= !memcmp(&info.locations[i], node, sizeof(*node));
	ferry_gcs_free(info.locations);
	return found;
}

/* Put @id (@size bytes) through the store socket of @c and wait until the directory of its
 * GCS lists the node, looked up by a client of our own (as a driver would). */
static void put_and_lookup(struct ferry__cluster *c, const struct ferry_object_id *id,
			   uint64_t size)
{
	const char *addr = ferry__cluster_gcs_address(c);
	struct ferry_gcs_client_opts go = {.addresses = &addr, .naddresses = 1};
	const struct ferry_node_id *node = ferry__embed_node_id(ferry__cluster_node(c));
	struct ferry_plasma_client *store = NULL;
	struct ferry_gcs_client *gcs = NULL;
	uint64_t deadline;
	void *data;

	ftest_assert_ok(ferry_plasma_client_connect(ferry__cluster_store_socket(c), NULL, &store));
	ftest_assert_ok(ferry_plasma_client_create(store, id, size, NULL, 0, &data));
	memset(data, 0x5a, size);
	ftest_assert_ok(ferry_plasma_client_seal(store, id));
	go.token = ferry__cluster_token(c, &go.token_len);
	ftest_assert_ok(ferry_gcs_client_connect(&go, &gcs));
	deadline = ferry__now_ms() + LISTED_WAIT_MS;
	while (!listed(gcs, id, node) && ferry__now_ms() < deadline)
		usleep(1000);
	ftest_assert_int_eq(listed(gcs, id, node), 1);
	ferry_gcs_client_destroy(gcs);
	ferry_plasma_client_disconnect(store);
}

/* Defaults: its own run directory under $TMPDIR and a random token; both gone after stop. */
FTEST(cluster_defaults_put_lookup_stop)
{
	struct ferry_object_id id = {.bytes = {1, 2, 3}};
	int threads = count_threads(), fds = count_fds();
	struct ferry__cluster *c = NULL;
	char run_dir[128];
	const char *sock;
	struct stat st;
	size_t len = 0;

	ftest_assert_ok(ferry__cluster_start(NULL, &c));
	sock = ferry__cluster_store_socket(c);
	ftest_assert_ok(stat(sock, &st));
	ftest_assert_true(S_ISSOCK(st.st_mode));
	ftest_assert_ptr_notnull(strrchr(sock, '/'));
	snprintf(run_dir, sizeof(run_dir), "%.*s", (int)(strrchr(sock, '/') - sock), sock);
	ftest_assert_int_eq(ftest_count_entries(run_dir), 2); /* store.sock and the runtime's .rt */
	ftest_assert_ptr_notnull(ferry__cluster_token(c, &len));
	ftest_assert_uint_eq(len, 64);
	ftest_assert_int_eq(strncmp(ferry__cluster_gcs_address(c), "127.0.0.1:", 10), 0);
	put_and_lookup(c, &id, 1 << 20);
	ferry__cluster_stop(c);
	ftest_assert_int_eq(ftest_count_entries(run_dir), -1);
	expect_back_to(threads, fds);
}

/* A run directory and a token of the caller's: the directory stays, empty. */
FTEST(cluster_given_run_dir_and_token)
{
	struct ferry__cluster_opts o = {.token = "local-test-token", .token_len = 16};
	struct ferry_object_id id = {.bytes = {4, 5, 6}};
	char dir[] = "/tmp/ferry-test-cluster-XXXXXX";
	struct ferry__cluster *c = NULL;
	const void *token;
	int threads, fds;
	size_t len = 0;

	ftest_assert_ptr_notnull(mkdtemp(dir));
	o.run_dir = dir;
	threads = count_threads();
	fds = count_fds();
	ftest_assert_ok(ferry__cluster_start(&o, &c));
	ftest_assert_int_eq(strncmp(ferry__cluster_store_socket(c), dir, strlen(dir)), 0);
	token = ferry__cluster_token(c, &len);
	ftest_assert_uint_eq(len, 16);
	ftest_assert_mem_eq(token, "local-test-token", 16);
	put_and_lookup(c, &id, 4096);
	ferry__cluster_stop(c);
	ftest_assert_int_eq(ftest_count_entries(dir), 0);
	expect_back_to(threads, fds);
	ftest_assert_ok(rmdir(dir));
}

/* Bad options: -errno, and nothing started or left. */
FTEST(cluster_bad_options)
{
	struct ferry__cluster_opts o = {.token = "x", .token_len = 0};
	int threads = count_threads(), fds = count_fds();
	struct ferry__cluster *c = NULL;
	char long_dir[200];

	ftest_assert_errno(ferry__cluster_start(&o, &c), -EINVAL);
	o.token_len = 100000;
	ftest_assert_errno(ferry__cluster_start(&o, &c), -EINVAL);
	memset(long_dir, 'a', sizeof(long_dir) - 1);
	long_dir[sizeof(long_dir) - 1] = '\0';
	o = (struct ferry__cluster_opts){.run_dir = long_dir};
	ftest_assert_errno(ferry__cluster_start(&o, &c), -ENAMETOOLONG);
	/* A run directory that does not exist: the store cannot bind its socket there. */
	o.run_dir = "/nonexistent/ferry-cluster";
	ftest_assert_int_lt(ferry__cluster_start(&o, &c), 0);
	ftest_assert_ptr_null(c);
	expect_back_to(threads, fds);
}
