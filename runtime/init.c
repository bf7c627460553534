/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry_init() and ferry_shutdown(): one runtime per process. With no address the local
 * cluster (cluster/cluster.h) starts inside this process; with "host:port" (a GCS) or "auto"
 * (the GCS the run directory $FERRY_RUN_DIR, default /tmp/ferry-$UID, names) the driver joins
 * that cluster through the node on its own host, found in the GCS's nodes table (alive, an
 * address of this host, its store socket here; of several, the one ferry_init_opts.node or
 * $FERRY_NODE names, else the first, said in the log). Either way the job's code is stored in the GCS
 * by content hash (runtime/code.c), the job is registered (jobs table, and the driver in the
 * workers table, so that a borrower can tell that it died), and one loop thread serves the
 * runtime's sockets.
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
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "cluster/embed.h"
#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/net.h"
#include "common/sha256.h"
#include "common/token.h"
#include "common/util.h"
#include "runtime/dial.h"
#include "runtime/owner.h"
#include "runtime/registry.h"
#include "runtime/ring.h"
#include "runtime/rt.h"
#include "runtime/task.h"
#include "transport/objmgr.h"

#define COMP "runtime"
#define DEFAULT_INLINE_MAX (100u << 10)
#define MAX_IFACES 64
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
	snprintf(ferry__rt.node_address, sizeof(ferry__rt.node_address), "%s",
		 ferry__embed_node_address(ferry__cluster_node(ferry__rt.cluster)));
	return 0;
}

/* @src into @dst (@size bytes), cut short if longer (then refused later as not found). */
static void copy_str(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = 0;
}

/* The run directory's `cluster` file: "address A" and "token PATH" lines. @joining: the
 * address given, when only the token is wanted from it (NULL for "auto"). */
static int read_cluster_file(const char *run_dir, const char *joining, char *address, size_t size,
			     char *token_path)
{
	char path[PATH_MAX + 16], line[PATH_MAX + 16];
	FILE *f;

	snprintf(path, sizeof(path), "%.*s/cluster", PATH_MAX - 1, run_dir);
	f = fopen(path, "re");
	if (!f) {
		int err = -errno;

		if (joining)
			FLOG_ERROR(
				COMP,
				"joining %s needs the cluster's token: set FERRY_TOKEN_FILE to "
				"the token file (the head's run directory has it), or "
				"FERRY_RUN_DIR to a run directory `ferry start` made on this host "
				"(%s: %s)",
				joining, path, ferry_strerror(err));
		else
			FLOG_ERROR(
				COMP,
				"no cluster started from %s (`ferry start --head` writes %s): %s",
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

/* Join a cluster `ferry start` runs: "auto" is the one of the run directory, "host:port" a GCS;
 * the token is $FERRY_TOKEN_FILE's, else the one the run directory's `cluster` file names (a
 * `ferry start` on this host wrote it). */
static int join(const char *address, struct where *w)
{
	const char *token_env = getenv("FERRY_TOKEN_FILE");
	char run_dir[PATH_MAX], token_path[PATH_MAX] = "";
	bool by_address = strcmp(address, "auto") != 0;
	int ret;

	ferry__run_dir_default(run_dir, sizeof(run_dir));
	if (!by_address || !token_env || !*token_env) {
		ret = read_cluster_file(run_dir, by_address ? address : NULL, w->gcs,
					sizeof(w->gcs), token_path);
		if (ret < 0)
			return ret;
	}
	if (by_address)
		snprintf(w->gcs, sizeof(w->gcs), "%s", address);
	if (token_env && *token_env)
		snprintf(token_path, sizeof(token_path), "%s", token_env);
	ret = ferry__token_read(token_path, w->token, sizeof(w->token));
	if (ret < 0) {
		FLOG_ERROR(COMP, "the cluster token %s: %s", token_path, ferry_strerror(ret));
		return ret;
	}
	w->token_len = (size_t)ret;
	return 0;
}

static bool is_local_ip(const char *ip, const struct ferry__net_iface *ifs, int n)
{
	if (!strncmp(ip, "127.", 4) || !strcmp(ip, "::1"))
		return true;
	for (int i = 0; i < n; i++)
		if (!strcmp(ifs[i].ip, ip))
			return true;
	return false;
}

/* How well node @n fits as "the node on this host": 0 not at all; 1 an address of this host
 * and a store socket here; 2 also this kernel's boot id (two containers sharing an address
 * are told apart by it). */
static int node_score(const struct ferry_gcs_node_info *n, const struct ferry__net_iface *ifs,
		      int nifs, const char *boot, struct ferry__node_addr *a)
{
	const char *text = n->address ? n->address : "";
	struct stat st;

	if (n->state != FERRY_GCS_NODE_ALIVE || ferry__node_addr_parse(text, strlen(text), a) < 0 ||
	    !a->shm_path[0] || !is_local_ip(a->ip, ifs, nifs) || stat(a->shm_path, &st) < 0 ||
	    !S_ISSOCK(st.st_mode))
		return 0;
	return *boot && !strcmp(a->host, boot) ? 2 : 1;
}

/* The nodes of this host, from the GCS's nodes table (as on a multi-host cluster, where the
 * node a driver must use is the one of its own host), and the one chosen. */
struct local_nodes {
	struct ferry_gcs_node_info *all; /* the table */
	int n;				 /* its rows */
	int *score;			 /* each row's node_score(): 0, it does not fit */
	int nfit;			 /* rows that fit */
};

/* The store socket of node @n, a row that fits (node_score() parsed its address), in @a. */
static const char *store_socket(const struct ferry_gcs_node_info *n, struct ferry__node_addr *a)
{
	const char *text = n->address ? n->address : "";

	if (ferry__node_addr_parse(text, strlen(text), a) < 0)
		a->shm_path[0] = '\0';
	return a->shm_path;
}

/* Does node @n, whose store socket is @sock, match @want: its ID's hex or a prefix of it (any
 * case), or the path of its store socket (the same file under another name, too)? */
static bool node_matches(const struct ferry_gcs_node_info *n, const char *sock, const char *want)
{
	char hex[2 * sizeof(n->id) + 1];
	struct stat a, b;

	if (strchr(want, '/'))
		return !strcmp(sock, want) || (stat(sock, &a) == 0 && stat(want, &b) == 0 &&
					       a.st_dev == b.st_dev && a.st_ino == b.st_ino);
	ferry_id_to_hex(&n->id, sizeof(n->id), hex, sizeof(hex));
	return strlen(want) <= strlen(hex) && !strncasecmp(hex, want, strlen(want));
}

/* The candidates, for a log line: "ID (store PATH), ...". */
static void list_candidates(const struct local_nodes *l, char *buf, size_t size)
{
	struct ferry__node_addr a;
	size_t used = 0;

	snprintf(buf, size, "%s", l->nfit ? "" : "none");
	for (int i = 0; i < l->n && used < size; i++) {
		const struct ferry_gcs_node_info *n = &l->all[i];
		char hex[2 * sizeof(n->id) + 1];
		int w;

		if (!l->score[i])
			continue;
		ferry_id_to_hex(&n->id, sizeof(n->id), hex, sizeof(hex));
		w = snprintf(buf + used, size - used, "%s%s (store %s)", used ? ", " : "", hex,
			     store_socket(n, &a));
		used += w > 0 ? (size_t)w : 0;
	}
}

/* Row of the node @want names among the candidates: -ENOENT none, -EINVAL several; logged. */
/* "node-N", the name `ferry start` prints and gives the node's directory in the run directory:
 * that directory's store socket into @sock. False for anything else. */
static bool run_dir_node(const char *want, char *sock, size_t size)
{
	char run_dir[PATH_MAX];
	unsigned long index;
	char *end;

	if (strncmp(want, "node-", 5) || !isdigit((unsigned char)want[5]))
		return false;
	index = strtoul(want + 5, &end, 10);
	if (*end || index == 0 || index > 1000000)
		return false;
	ferry__run_dir_default(run_dir, sizeof(run_dir));
	snprintf(sock, size, "%.*s/node-%lu/store.sock", PATH_MAX - 64, run_dir, index);
	return true;
}

static int pick_wanted(const struct local_nodes *l, const char *want, const char *gcs)
{
	struct ferry__node_addr a;
	char names[1024], sock[PATH_MAX];
	const char *match = run_dir_node(want, sock, sizeof(sock)) ? sock : want;
	int found = -1, matches = 0;

	for (int i = 0; i < l->n; i++)
		if (l->score[i] && node_matches(&l->all[i], store_socket(&l->all[i], &a), match)) {
			found = i;
			matches++;
		}
	if (matches == 1)
		return found;
	list_candidates(l, names, sizeof(names));
	FLOG_ERROR(COMP,
		   "node '%s' (FERRY_NODE or ferry_init_opts.node) %s of the cluster at %s that "
		   "runs on this host; they are: %s",
		   want,
		   matches ? "is an ambiguous prefix: it matches several nodes"
			   : "matches no live node",
		   gcs, names);
	return matches ? -EINVAL : -ENOENT;
}

/* Row of the best fit (the first of the highest score; one fits at least) when none was asked
 * for; when several fit, say which and how to choose. */
static int pick_best(const struct local_nodes *l)
{
	char names[1024], hex[2 * sizeof(struct ferry_node_id) + 1];
	struct ferry__node_addr a;
	int best = -1;

	for (int i = 0; i < l->n; i++)
		if (l->score[i] && (best < 0 || l->score[i] > l->score[best]))
			best = i;
	if (l->nfit > 1) {
		list_candidates(l, names, sizeof(names));
		ferry_id_to_hex(&l->all[best].id, sizeof(l->all[best].id), hex, sizeof(hex));
		FLOG_WARN(COMP,
			  "%d nodes of the cluster run on this host; joining %s (store %s). "
			  "Choose one with FERRY_NODE or ferry_init_opts.node: its ID, a unique "
			  "prefix of it, or its store socket (`ferry status` lists them): %s",
			  l->nfit, hex, store_socket(&l->all[best], &a), names);
	}
	return best;
}

/* Fill @l from the GCS: every row, and how well each fits as "the node on this host". */
static int list_local_nodes(const char *gcs, struct local_nodes *l)
{
	struct ferry__net_iface ifs[MAX_IFACES];
	struct ferry__node_addr a;
	char boot[48] = "";
	int nifs;

	l->n = ferry_gcs_node_list(ferry__rt.gcs, &l->all);
	if (l->n < 0) {
		FLOG_ERROR(COMP, "cannot list the nodes of the GCS at %s: %s", gcs,
			   ferry_strerror(l->n));
		return l->n;
	}
	l->score = ferry__calloc((size_t)l->n + 1, sizeof(*l->score));
	if (!l->score)
		return -ENOMEM;
	nifs = ferry__net_ifaces("/sys", ifs, MAX_IFACES);
	nifs = nifs < 0 ? 0 : nifs;
	if (ferry__host_boot_id(boot, sizeof(boot)) < 0)
		boot[0] = 0;
	for (int i = 0; i < l->n; i++) {
		l->score[i] = node_score(&l->all[i], ifs, nifs, boot, &a);
		l->nfit += l->score[i] > 0;
	}
	return 0;
}

/* The node this driver joins: @want's (an ID, a prefix of one, or a store socket), else the
 * node on this host (the best fit). Its store socket, address and ID into ferry__rt. */
static int find_node(const char *gcs, const char *want)
{
	struct local_nodes l = {0};
	struct ferry__node_addr a;
	int row, ret;

	ret = list_local_nodes(gcs, &l);
	if (ret < 0)
		goto out;
	if (want) {
		row = ret = pick_wanted(&l, want, gcs);
	} else if (l.nfit) {
		row = pick_best(&l);
	} else {
		FLOG_ERROR(COMP,
			   "no node of the cluster at %s runs on this host: none of its %d nodes "
			   "is alive with an address of this host and a store socket here (`ferry "
			   "start --address %s` starts one)",
			   gcs, l.n, gcs);
		row = ret = -ENOENT;
	}
	if (row >= 0) {
		snprintf(ferry__rt.store_socket, sizeof(ferry__rt.store_socket), "%s",
			 store_socket(&l.all[row], &a));
		snprintf(ferry__rt.node_address, sizeof(ferry__rt.node_address), "%s",
			 l.all[row].address);
		ferry__rt.node = l.all[row].id;
		ret = 0;
	}
out:
	ferry__free(l.score);
	ferry_gcs_free(l.all);
	return ret;
}

static int connect_gcs(const struct where *w)
{
	const char *addr = w->gcs;
	struct ferry_gcs_client_opts go = {
		.addresses = &addr,
		.naddresses = 1,
		.token = w->token,
		.token_len = w->token_len,
	};
	int ret = ferry_gcs_client_connect(&go, &ferry__rt.gcs);

	if (ret < 0)
		FLOG_ERROR(COMP, "cannot reach the GCS at %s: %s", w->gcs, ferry_strerror(ret));
	return ret;
}

static int connect_store(void)
{
	struct ferry_plasma_connect_opts po = {.owner = ferry__rt.self};
	int ret = ferry_plasma_client_connect(ferry__rt.store_socket, &po, &ferry__rt.store);

	if (ret < 0)
		FLOG_ERROR(COMP, "store %s: %s", ferry__rt.store_socket, ferry_strerror(ret));
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
	/* The loop polls its rings while it spins (runtime/ring.h). */
	struct ferry__loop_opts lo = {.spin_us = ferry__rt_ring_spin_us()};
	int ret = ferry__loop_create(&lo, &ferry__rt.loop);

	if (ret < 0)
		return ret;
	ferry__rt_submit_init();
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
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_tev_start, NULL);
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
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_tev_stop, NULL);
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_owner_srv_stop, NULL);
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_sub_stop, NULL);
	loop_poll(ferry__rt_sub_close_node, NULL, STOP_FLUSH_TRIES);
	(void)ferry__loop_call(ferry__rt.loop, ferry__rt_sub_close_node, &ferry__rt);
	loop_poll(ferry__rt_sub_open_conns, NULL, STOP_CLOSE_TRIES);
	ferry__loop_stop(ferry__rt.loop);
	pthread_join(ferry__rt.loop_thread, NULL);
	ferry__loop_destroy(ferry__rt.loop);
	/* Before sub_fini: freeing an actor's queued tasks unrefs objects, which would post
	 * their frees to the destroyed loop. */
	ferry__rt.loop = NULL;
	ferry__rt_sub_fini();
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
}

/* Join or start the cluster, connect to it, store the job's code in its GCS. */
static int attach(const struct ferry_init_opts *o)
{
	const char *address = o->address, *node = o->node;
	struct where w = {0};
	int ret;

	if (!address) {
		address = getenv("FERRY_ADDRESS");
		if (address && !*address)
			address = NULL;
	}
	if (!node)
		node = getenv("FERRY_NODE");
	if (node && !*node)
		node = NULL;
	ret = address ? join(address, &w) : start_local(o, &w);
	if (ret < 0)
		goto err_cluster;
	ret = connect_gcs(&w);
	if (ret == 0)
		ret = ferry__rt_dial_setup(w.token, w.token_len); /* runtime/dial.h */
	if (ret < 0)
		goto err_cluster;
	ret = address ? find_node(w.gcs, node) : 0;
	if (ret == 0)
		ret = connect_store();
	if (ret < 0)
		goto err_gcs;
	if (ferry__rt.code_path[0]) {
		ret = ferry__rt_code_upload(ferry__rt.gcs, ferry__rt.code_path,
					    ferry__rt.code_hash);
		if (ret < 0)
			goto err_store;
	}
	ret = register_job();
	if (ret < 0)
		goto err_store;
	return 0;
err_store:
	ferry_plasma_client_disconnect(ferry__rt.store);
	ferry__rt.store = NULL;
err_gcs:
	ferry_gcs_client_destroy(ferry__rt.gcs);
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
	(void)ferry__rt_node_watch_start(); /* warned: without it, sockets' closes tell */
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
	ferry__rt_objects_wake_all();
	ferry__rt_objects_free_held(); /* sent before the loop closes the nodes' sockets */
	pthread_mutex_unlock(&ferry__rt.lock);
	ferry__rt_node_watch_stop();
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
