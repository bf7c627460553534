/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry_init() and ferry_shutdown(): one runtime per process. With no address the local
 * cluster (cluster/cluster.h) starts inside this process; with "host:port" or "auto" the driver
 * joins the cluster that `ferry start` runs on this host, through the node whose store socket
 * the run directory ($FERRY_RUN_DIR, default /tmp/ferry-$UID) names. Either way the job is
 * registered in the GCS (jobs table, and the driver in the workers table, so that a borrower
 * can tell that it died), and one loop thread serves the runtime's sockets.
 *
 * DESIGN
 * - init_lock serialises init and shutdown; ferry__rt.lock guards what the API calls share
 *   (rt.h). `up` is set last in init and cleared first in shutdown, under ferry__rt.lock, so a
 *   call racing with shutdown sees -ENOTCONN rather than a half-torn runtime.
 * - Shutdown order: the loop gives its leases back and closes its sockets (submit.c), then
 *   stops; the objects still counted are deleted from the store; the job is marked finished
 *   and the driver dead in the GCS; then the store client, the GCS client and the local
 *   cluster go. Nothing of the runtime (thread, fd, socket file) is left.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "cluster/embed.h"
#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/sha256.h"
#include "common/token.h"
#include "runtime/owner.h"
#include "runtime/registry.h"
#include "runtime/rt.h"

#define COMP "runtime"
#define DEFAULT_INLINE_MAX (100u << 10)
#define MAX_NODES_PER_HOST 64 /* node-N slots `ferry start` uses in a run directory */
/* Shutdown waits for the lease returns to be written and for the sockets to close, polling
 * the loop: 100 ms, then 2 s at most (a socket's close is one loop pass, not a round trip). */
#define STOP_POLL_MS 2
#define STOP_FLUSH_TRIES 50
#define STOP_CLOSE_TRIES 1000

struct ferry__rt ferry__rt = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.completion_fd = -1,
};
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* Where the cluster is: filled by start_local() or join(). */
struct where {
	char gcs[256];			 /* "host:port" */
	char token[FERRY_TOKEN_MAX + 1]; /* the cluster token */
	size_t token_len;		 /* its bytes */
};

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int hash_file(const char *path, uint8_t out[FERRY_SHA256_SIZE])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = ferry__sha256_fd(fd, out);
	close(fd);
	return ret;
}

/* The job's code: must exist; its absolute path (workers run elsewhere) and SHA-256. */
static int set_code(const char *path)
{
	char abs[PATH_MAX];
	int ret;

	if (!path || !*path)
		return 0;
	if (!realpath(path, abs)) {
		ret = -errno;
		FLOG_ERROR(COMP, "the job's code %s: %s", path, ferry_strerror(ret));
		return ret;
	}
	if (strlen(abs) >= sizeof(ferry__rt.code_path)) {
		FLOG_ERROR(COMP, "the job's code %s: path too long", path);
		return -ENAMETOOLONG;
	}
	ret = hash_file(abs, ferry__rt.code_hash);
	if (ret < 0) {
		FLOG_ERROR(COMP, "the job's code %s: %s", abs, ferry_strerror(ret));
		return ret;
	}
	snprintf(ferry__rt.code_path, sizeof(ferry__rt.code_path), "%s", abs);
	return 0;
}

static int start_local(const struct ferry_init_opts *o, struct where *w)
{
	struct ferry__cluster_opts co = {0};
	const void *token;
	int ret;

	co.memory_bytes = o->memory_bytes;
	co.num_workers = o->num_workers;
	ret = ferry__cluster_start(&co, &ferry__rt.cluster);
	if (ret < 0) {
		FLOG_ERROR(COMP, "cannot start the local cluster: %s", ferry_strerror(ret));
		return ret;
	}
	snprintf(w->gcs, sizeof(w->gcs), "%s", ferry__cluster_gcs_address(ferry__rt.cluster));
	token = ferry__cluster_token(ferry__rt.cluster, &w->token_len);
	memcpy(w->token, token, w->token_len);
	snprintf(ferry__rt.store_socket, sizeof(ferry__rt.store_socket), "%s",
		 ferry__cluster_store_socket(ferry__rt.cluster));
	ferry__rt.node = *ferry__embed_node_id(ferry__cluster_node(ferry__rt.cluster));
	return 0;
}

/* @src into @dst (@size bytes), cut short if longer (then refused later as not found). */
static void copy_str(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = 0;
}

/* The run directory's `cluster` file: "address A" and "token PATH" lines. */
static int read_cluster_file(const char *run_dir, char *address, size_t size, char *token_path)
{
	char path[PATH_MAX + 16], line[PATH_MAX + 16];
	FILE *f;

	snprintf(path, sizeof(path), "%.*s/cluster", PATH_MAX - 1, run_dir);
	f = fopen(path, "re");
	if (!f) {
		int err = -errno;

		FLOG_ERROR(COMP, "no cluster started from %s (`ferry start --head` writes %s): %s",
			   run_dir, path, ferry_strerror(err));
		return err;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "address ", 8))
			copy_str(address, size, line + 8);
		else if (!strncmp(line, "token ", 6))
			copy_str(token_path, PATH_MAX, line + 6);
	}
	fclose(f);
	if (!*address || !*token_path) {
		FLOG_ERROR(COMP, "%s names no GCS address or token", path);
		return -EINVAL;
	}
	return 0;
}

/* The store socket of the first node `ferry start` runs from @run_dir. */
static int find_node(const char *run_dir)
{
	struct stat st;

	for (int i = 0; i < MAX_NODES_PER_HOST; i++) {
		int n = snprintf(ferry__rt.store_socket, sizeof(ferry__rt.store_socket),
				 "%s/node-%d/store.sock", run_dir, i);

		if (n > 0 && (size_t)n < sizeof(ferry__rt.store_socket) &&
		    stat(ferry__rt.store_socket, &st) == 0 && S_ISSOCK(st.st_mode))
			return 0;
	}
	ferry__rt.store_socket[0] = 0;
	FLOG_ERROR(COMP, "no node of the cluster runs on this host (none in %s)", run_dir);
	return -ENOENT;
}

/* Join a cluster `ferry start` runs: "auto" is the one of the run directory. */
static int join(const char *address, struct where *w)
{
	const char *env = getenv("FERRY_RUN_DIR");
	char run_dir[PATH_MAX], token_path[PATH_MAX] = "";
	int ret;

	if (env && *env)
		snprintf(run_dir, sizeof(run_dir), "%s", env);
	else
		snprintf(run_dir, sizeof(run_dir), "/tmp/ferry-%u", (unsigned)getuid());
	ret = read_cluster_file(run_dir, w->gcs, sizeof(w->gcs), token_path);
	if (ret < 0)
		return ret;
	if (strcmp(address, "auto") != 0)
		snprintf(w->gcs, sizeof(w->gcs), "%s", address);
	ret = ferry__token_read(token_path, w->token, sizeof(w->token));
	if (ret < 0)
		return ret;
	w->token_len = (size_t)ret;
	return find_node(run_dir);
}

static int connect_store(void)
{
	struct ferry_plasma_connect_opts po = {.owner = ferry__rt.self};
	int ret = ferry_plasma_client_connect(ferry__rt.store_socket, &po, &ferry__rt.store);

	if (ret < 0)
		FLOG_ERROR(COMP, "store %s: %s", ferry__rt.store_socket, ferry_strerror(ret));
	return ret;
}

static int connect_clients(const struct where *w)
{
	const char *addr = w->gcs;
	struct ferry_gcs_client_opts go = {
		.addresses = &addr,
		.naddresses = 1,
		.token = w->token,
		.token_len = w->token_len,
	};
	int ret;

	ret = ferry_gcs_client_connect(&go, &ferry__rt.gcs);
	if (ret < 0) {
		FLOG_ERROR(COMP, "GCS %s: %s", w->gcs, ferry_strerror(ret));
		return ret;
	}
	ret = connect_store();
	if (ret < 0) {
		ferry_gcs_client_destroy(ferry__rt.gcs);
		ferry__rt.gcs = NULL;
	}
	return ret;
}

static int register_job(void)
{
	struct ferry_gcs_job_info job = {
		.id = ferry__rt.job,
		.driver_node = ferry__rt.node,
		.driver_pid = (uint32_t)getpid(),
		.entrypoint = ferry__rt.code_path[0] ? ferry__rt.code_path : NULL,
		.start_ms = wall_ms(),
	};
	struct ferry_gcs_worker_info me = {
		.id = ferry__rt.self,
		.node = ferry__rt.node,
		.job = ferry__rt.job,
		.pid = (uint32_t)getpid(),
		.start_ms = job.start_ms,
	};
	int ret = ferry_gcs_job_add(ferry__rt.gcs, &job);

	if (ret >= 0)
		ret = ferry_gcs_worker_add(ferry__rt.gcs, &me);
	if (ret < 0)
		FLOG_ERROR(COMP, "cannot register the job in the GCS: %s", ferry_strerror(ret));
	return ret < 0 ? ret : 0;
}

static void *loop_thread(void *arg)
{
	(void)arg;
	ferry__loop_thread_run(ferry__rt.loop, "ferry-runtime", COMP);
	return NULL;
}

static int start_loop(void)
{
	int ret = ferry__loop_create(NULL, &ferry__rt.loop);

	if (ret < 0)
		return ret;
	ret = ferry__rt_sub_init();
	if (ret < 0)
		goto err_loop;
	ret = -pthread_create(&ferry__rt.loop_thread, NULL, loop_thread, NULL);
	if (ret < 0)
		goto err_sub;
	/* A driver is known to its node from the start (a worker joins when its tasks submit):
	 * if it dies, the node frees what it owns. A failure shows again at the first submit. */
	if (!ferry__rt.worker)
		(void)ferry__loop_call(ferry__rt.loop, ferry__rt_sub_connect, NULL);
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_owner_srv_start, NULL);
	return 0;
err_sub:
	ferry__rt_sub_fini();
err_loop:
	ferry__loop_destroy(ferry__rt.loop);
	ferry__rt.loop = NULL;
	return ret;
}

/* Poll @fn on the loop every STOP_POLL_MS until it returns 0, at most @tries times. */
static void loop_poll(int (*fn)(void *), void *arg, int tries)
{
	while (tries-- > 0 && ferry__loop_call(ferry__rt.loop, fn, arg) > 0)
		usleep(STOP_POLL_MS * 1000);
}

/* The loop ends its work (lease returns written, every socket's on_close run), then stops. */
static void stop_loop(void)
{
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_owner_srv_stop, NULL);
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_sub_stop, NULL);
	loop_poll(ferry__rt_sub_close_node, NULL, STOP_FLUSH_TRIES);
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_sub_close_node, &ferry__rt);
	loop_poll(ferry__rt_sub_open_conns, NULL, STOP_CLOSE_TRIES);
	ferry__loop_stop(ferry__rt.loop);
	pthread_join(ferry__rt.loop_thread, NULL);
	ferry__loop_destroy(ferry__rt.loop);
	ferry__rt_sub_fini();
	ferry__rt.loop = NULL;
}

static void reset_ids(const struct ferry_init_opts *o)
{
	ferry_worker_id_random(&ferry__rt.self);
	ferry_job_id_random(&ferry__rt.job);
	ferry_task_id_random(&ferry__rt.root_task);
	memset(&ferry__rt.node, 0, sizeof(ferry__rt.node));
	ferry__rt.put_seq = 0;
	ferry__rt.submit_seq = 0;
	ferry__rt.inline_max = o->inline_max ? o->inline_max : DEFAULT_INLINE_MAX;
	ferry__rt.code_path[0] = 0;
	ferry__rt.store_socket[0] = 0;
	ferry__rt.incoming = NULL;
	ferry__rt.incoming_tail = &ferry__rt.incoming;
	ferry__rt.incoming_posted = false;
}

/* Join or start the cluster and connect to it. */
static int attach(const struct ferry_init_opts *o)
{
	const char *address = o->address;
	struct where w = {0};
	int ret;

	if (!address) {
		address = getenv("FERRY_ADDRESS");
		if (address && !*address)
			address = NULL;
	}
	ret = address ? join(address, &w) : start_local(o, &w);
	if (ret < 0)
		goto err_cluster;
	ret = connect_clients(&w);
	if (ret < 0)
		goto err_cluster;
	ret = register_job();
	if (ret < 0)
		goto err_clients;
	return 0;
err_clients:
	ferry_plasma_client_disconnect(ferry__rt.store);
	ferry_gcs_client_destroy(ferry__rt.gcs);
	ferry__rt.store = NULL;
	ferry__rt.gcs = NULL;
err_cluster:
	ferry__cluster_stop(ferry__rt.cluster);
	ferry__rt.cluster = NULL;
	return ret;
}

static void detach(void)
{
	if (ferry__rt.gcs) {
		(void)ferry_gcs_job_finish(ferry__rt.gcs, &ferry__rt.job);
		(void)ferry_gcs_worker_dead(ferry__rt.gcs, &ferry__rt.self, FERRY_GCS_EXIT_NORMAL,
					    "the driver shut down");
	}
	ferry_plasma_client_disconnect(ferry__rt.store);
	ferry_gcs_client_destroy(ferry__rt.gcs);
	ferry__cluster_stop(ferry__rt.cluster);
	ferry__rt.store = NULL;
	ferry__rt.gcs = NULL;
	ferry__rt.cluster = NULL;
}

/* A worker's runtime: its own id, job and node, its store; no cluster, no GCS. */
static int set_worker(const struct ferry__rt_worker_info *wi)
{
	if (strlen(wi->store_socket) >= sizeof(ferry__rt.store_socket) ||
	    strlen(wi->code_path) >= sizeof(ferry__rt.code_path))
		return -ENAMETOOLONG;
	ferry__rt.worker = wi;
	ferry__rt.self = wi->id;
	ferry__rt.job = wi->job;
	ferry__rt.node = wi->node;
	snprintf(ferry__rt.store_socket, sizeof(ferry__rt.store_socket), "%s", wi->store_socket);
	snprintf(ferry__rt.code_path, sizeof(ferry__rt.code_path), "%s", wi->code_path);
	memcpy(ferry__rt.code_hash, wi->code_hash, sizeof(ferry__rt.code_hash));
	return 0;
}

static int init_locked(const struct ferry_init_opts *o, const struct ferry__rt_worker_info *wi)
{
	const char *code = o->code_path ? o->code_path : getenv("FERRY_CODE");
	int ret;

	if (ferry__rt.up)
		return -EALREADY;
	ret = ferry__registry_check();
	if (ret < 0)
		return ret;
	reset_ids(o);
	ret = wi ? set_worker(wi) : set_code(code);
	if (ret < 0)
		return ret;
	ferry__hashmap_init(&ferry__rt.objects, sizeof(struct ferry_object_id), sizeof(void *));
	ferry__cond_init_monotonic(&ferry__rt.cond);
	ret = ferry__rt_completion_init();
	if (ret < 0)
		goto err_cond;
	ret = wi ? connect_store() : attach(o);
	if (ret < 0)
		goto err_completion;
	ret = start_loop();
	if (ret < 0)
		goto err_detach;
	pthread_mutex_lock(&ferry__rt.lock);
	ferry__rt.up = true;
	pthread_mutex_unlock(&ferry__rt.lock);
	FLOG_INFO(COMP, "%s on store %s", wi ? "a worker's runtime" : "driver of a new job",
		  ferry__rt.store_socket);
	return 0;
err_detach:
	detach();
err_completion:
	ferry__rt_completion_fini();
err_cond:
	pthread_cond_destroy(&ferry__rt.cond);
	ferry__hashmap_fini(&ferry__rt.objects);
	ferry__rt.worker = NULL;
	return ret;
}

int ferry_init(const struct ferry_init_opts *opts)
{
	static const struct ferry_init_opts defaults;
	int ret;

	pthread_mutex_lock(&init_lock);
	ret = init_locked(opts ? opts : &defaults, NULL);
	pthread_mutex_unlock(&init_lock);
	if (ret < 0 && ret != -EALREADY)
		FLOG_ERROR(COMP, "ferry_init: %s", ferry_strerror(ret));
	return ret;
}

int ferry__rt_init_worker(const struct ferry__rt_worker_info *info)
{
	static const struct ferry_init_opts defaults;
	int ret;

	pthread_mutex_lock(&init_lock);
	ferry__rt_block_reset();
	ret = init_locked(&defaults, info);
	pthread_mutex_unlock(&init_lock);
	if (ret < 0)
		FLOG_ERROR(COMP, "the worker's runtime (its tasks cannot submit): %s",
			   ferry_strerror(ret));
	return ret;
}

void ferry_shutdown(void)
{
	pthread_mutex_lock(&init_lock);
	pthread_mutex_lock(&ferry__rt.lock);
	if (!ferry__rt.up) {
		pthread_mutex_unlock(&ferry__rt.lock);
		pthread_mutex_unlock(&init_lock);
		return;
	}
	ferry__rt.up = false;
	pthread_cond_broadcast(&ferry__rt.cond);
	pthread_mutex_unlock(&ferry__rt.lock);
	stop_loop();
	ferry__rt_borrow_fini(); /* owners drop the counts this process borrowed */
	pthread_mutex_lock(&ferry__rt.lock);
	ferry__rt_objects_clear();
	pthread_mutex_unlock(&ferry__rt.lock);
	detach();
	ferry__hashmap_fini(&ferry__rt.objects);
	ferry__rt_completion_fini();
	pthread_cond_destroy(&ferry__rt.cond);
	ferry__rt.worker = NULL;
	pthread_mutex_unlock(&init_lock);
}
