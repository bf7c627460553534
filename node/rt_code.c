/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A job's code where a node's workers can load it: the library the lease names when it is on
 * this host with the job's hash, else a copy fetched from the GCS (node/rt_code.h's layout)
 * into the node's cache, the directory "<store socket>.code" beside its runtime socket.
 *
 * DESIGN
 * - State on the loop thread. One entry per hash, kept for the node's life (queued requests
 *   point at it): NONE (nothing usable known), CHECKING, READY (path verified once), FETCHING;
 *   requests park on it while it checks or fetches. The first request of a hash checks the
 *   named file, then the cache file, by hashing them: once per hash and node.
 * - Hashing and writing run on the node's disk helper thread (common/offload.h), never on the
 *   loop: a library of hundreds of MiB would stall every socket of the node. An entry has at
 *   most one job out; the loop does not touch the file, the hash state or the chunk meanwhile.
 * - A fetch is a chain of asynchronous GCS gets (the marker, then each chunk) on the node's
 *   GCS client, whose callbacks run on this loop. Each chunk goes to the helper, which writes
 *   it to "<hex>.so.tmp" and hashes it; the next get starts when it is done. The file is
 *   renamed to "<hex>.so" only when every byte is there and the hash matches. The parked
 *   requests then go to the lease queue, or are answered with the error (-ENOENT when the GCS
 *   has no such hash).
 * - A copy that goes bad later (the file changed, a cache entry corrupted) is seen by the
 *   worker's own hash check: its assign fails with -EBADMSG and the request comes back here
 *   once (ferry__rt_code_retry) to fetch a good copy.
 * - Stop: the GCS client is destroyed before the node's runtime state is freed, so every
 *   fetch's callback has run (-ECANCELED) before ferry__rt_code_free(); the disk helper ends
 *   before the loop is destroyed (ferry__rt_code_stop: its jobs' callbacks run there); the cache
 *   directory goes with the node (an embedded node lives in $TMPDIR and must leave nothing).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/offload.h"
#include "common/sha256.h"
#include "common/util.h"
#include "node/node_int.h"
#include "node/rt_code.h"
#include "node/rt_int.h"

#define COMP "node"
#define HEX_LEN (2 * FERRY_SHA256_SIZE)

enum code_state {
	CODE_NONE = 0,	   /* nothing usable known: the next request resolves again */
	CODE_READY = 1,	   /* path holds the job's bytes (checked once) */
	CODE_FETCHING = 2, /* a fetch is out; requests wait in `waiting` */
	CODE_CHECKING = 3, /* the helper hashes the named and the cached file; requests wait */
};

struct rt_code {
	struct ferry__node_rt *rt;		/* owner */
	uint8_t hash[FERRY_SHA256_SIZE];	/* the content hash */
	char hex[HEX_LEN + 1];			/* its hex */
	enum code_state state;			/* see the enum */
	char path[PATH_MAX];			/* READY: the file workers load */
	struct rt_req *waiting, **waiting_tail; /* FETCHING: parked requests, FIFO */
	uint32_t nwaiting;			/* in the list */
	int fd;					/* FETCHING: the temporary file, or -1 */
	uint64_t size;				/* FETCHING: the library's bytes (the marker) */
	uint64_t got;				/* FETCHING: written so far */
	uint32_t chunk;				/* FETCHING: the next chunk's index */
	struct ferry__sha256 sha;		/* FETCHING: the hash of what was written */
	struct ferry__offload_job job;		/* the one job out on the disk helper */
	char named[PATH_MAX];			/* CHECKING: the library the request names */
	int matched;				/* CHECKING: 1 named, 2 cached, 0 neither */
	void *chunk_buf;			/* a chunk being written (the GCS's buffer) */
	size_t chunk_len;			/* its bytes */
	struct rt_code *next;			/* rt->codes */
};

static int cache_dir(const struct ferry__node_rt *rt, char *out, size_t size)
{
	int n = snprintf(out, size, "%s.code", rt->node->socket_path);

	return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

static int cache_file(const struct rt_code *c, const char *suffix, char *out, size_t size)
{
	char dir[PATH_MAX];
	int n;

	if (cache_dir(c->rt, dir, sizeof(dir)) < 0)
		return -ENAMETOOLONG;
	n = snprintf(out, size, "%s/%s.so%s", dir, c->hex, suffix);
	return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

/* Does the regular file at @path hash to @want? */
static bool file_matches(const char *path, const uint8_t *want)
{
	uint8_t got[FERRY_SHA256_SIZE];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), ret;

	if (fd < 0)
		return false;
	ret = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? ferry__sha256_fd(fd, got) : -EINVAL;
	close(fd);
	return ret == 0 && memcmp(got, want, sizeof(got)) == 0;
}

static struct rt_code *find(struct ferry__node_rt *rt, const uint8_t *hash)
{
	for (struct rt_code *c = rt->codes; c; c = c->next)
		if (!memcmp(c->hash, hash, sizeof(c->hash)))
			return c;
	return NULL;
}

static struct rt_code *code_new(struct ferry__node_rt *rt, const uint8_t *hash)
{
	struct rt_code *c = ferry__calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->rt = rt;
	memcpy(c->hash, hash, sizeof(c->hash));
	ferry_id_to_hex(hash, sizeof(c->hash), c->hex, sizeof(c->hex));
	c->fd = -1;
	c->waiting_tail = &c->waiting;
	c->next = rt->codes;
	rt->codes = c;
	return c;
}

static void park(struct rt_code *c, struct rt_req *req)
{
	req->next = NULL;
	*c->waiting_tail = req;
	c->waiting_tail = &req->next;
	c->nwaiting++;
	c->rt->code_parked++;
}

static void fetch_end_file(struct rt_code *c)
{
	char tmp[PATH_MAX];

	if (c->fd < 0)
		return;
	close(c->fd);
	c->fd = -1;
	if (cache_file(c, ".tmp", tmp, sizeof(tmp)) == 0)
		unlink(tmp);
}

/* The parked requests go on: queued, or answered with @status and @why. */
static void release(struct rt_code *c, int status, const char *why)
{
	struct ferry__node_rt *rt = c->rt;
	struct rt_req *req;

	while ((req = c->waiting)) {
		c->waiting = req->next;
		c->nwaiting--;
		rt->code_parked--;
		req->next = NULL;
		ferry__rt_lease_code_done(rt, req, status, why);
	}
	c->waiting_tail = &c->waiting;
	if (!rt->stopping)
		ferry__rt_lease_serve(rt);
}

/* The fetch (or the check) ended. */
static void fetch_done(struct rt_code *c, int status, const char *why)
{
	bool fetched = c->state == CODE_FETCHING;

	fetch_end_file(c);
	c->state = status == 0 ? CODE_READY : CODE_NONE;
	if (status < 0 && !c->rt->stopping)
		FLOG_WARN(COMP, "runtime: the job's code %s: %s", c->hex, why);
	else if (status == 0 && fetched)
		FLOG_INFO(COMP, "runtime: the job's code %s fetched from the GCS into %s", c->hex,
			  c->path);
	release(c, status, why);
}

static void fetch_failed(struct rt_code *c, int status, const char *what)
{
	char why[512], node[FERRY_ID_HEX_MAX];

	ferry_node_id_to_hex(&c->rt->node->id, node, sizeof(node));
	snprintf(why, sizeof(why), "node %s cannot fetch the job's code sha256 %s from the GCS: %s",
		 node, c->hex, what);
	fetch_done(c, status, why);
}

static void on_chunk(void *arg, int status, void *result);

static void fetch_next(struct rt_code *c)
{
	char key[FERRY__CODE_KEY_MAX];
	int ret, n = snprintf(key, sizeof(key), "%s.%" PRIu32, c->hex, c->chunk);

	ret = ferry_gcs_kv_get_async(c->rt->node->gcs, FERRY__CODE_NS, strlen(FERRY__CODE_NS), key,
				     (size_t)n, on_chunk, c);
	if (ret < 0)
		fetch_failed(c, ret, ferry_strerror(ret));
}

/* Every byte is in the temporary file: check the hash, then make it the cache entry. */
static void fetch_finish(struct rt_code *c)
{
	uint8_t got[FERRY_SHA256_SIZE];
	char tmp[PATH_MAX];

	ferry__sha256_final(&c->sha, got);
	if (memcmp(got, c->hash, sizeof(got))) {
		fetch_failed(c, -EBADMSG, "the bytes stored under it do not hash to it");
		return;
	}
	if (cache_file(c, ".tmp", tmp, sizeof(tmp)) < 0) {
		fetch_failed(c, -ENAMETOOLONG, "the node's cache path is too long");
		return;
	}
	if (rename(tmp, c->path) < 0) {
		int err = -errno;

		fetch_failed(c, err, "cannot install the copy in the node's cache");
		return;
	}
	close(c->fd);
	c->fd = -1;
	fetch_done(c, 0, NULL);
}

static int write_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w, n -= (size_t)w, off += (uint64_t)w;
	}
	return 0;
}

static struct rt_code *of_job(struct ferry__offload_job *job)
{
	return FERRY_CONTAINER_OF(job, struct rt_code, job);
}

/* Disk helper: write the chunk at its place and hash it. */
static int chunk_work(struct ferry__offload_job *job)
{
	struct rt_code *c = of_job(job);
	int ret = write_all(c->fd, c->chunk_buf, c->chunk_len, c->got);

	if (ret == 0)
		ferry__sha256_update(&c->sha, c->chunk_buf, c->chunk_len);
	return ret;
}

/* Loop thread: the chunk is written (or not); the next get, or the end. */
static void chunk_done(struct ferry__offload_job *job, int status)
{
	struct rt_code *c = of_job(job);
	char what[160];

	ferry_gcs_free(c->chunk_buf);
	c->chunk_buf = NULL;
	if (status == -ECANCELED || c->rt->stopping) {
		fetch_done(c, -ECANCELED, "the node stops");
		return;
	}
	if (status < 0) {
		snprintf(what, sizeof(what), "writing its copy: %s", ferry_strerror(status));
		fetch_failed(c, status, what);
		return;
	}
	c->got += c->chunk_len;
	c->chunk++;
	if (c->got == c->size)
		fetch_finish(c);
	else
		fetch_next(c);
}

/* One chunk (status: its size). Loop thread. */
static void on_chunk(void *arg, int status, void *result)
{
	struct rt_code *c = arg;
	char what[160];

	if (c->rt->stopping) {
		ferry_gcs_free(result);
		fetch_done(c, -ECANCELED, "the node stops");
		return;
	}
	if (status < 0 || status == 0 || (uint64_t)status > c->size - c->got ||
	    (uint64_t)status > FERRY__CODE_CHUNK_BYTES) {
		snprintf(what, sizeof(what), "chunk %" PRIu32 ": %s", c->chunk,
			 status < 0 ? ferry_strerror(status) : "not the size the marker says");
		ferry_gcs_free(result);
		fetch_failed(c, status == -ENOENT || status >= 0 ? -EBADMSG : status, what);
		return;
	}
	c->chunk_buf = result;
	c->chunk_len = (size_t)status;
	c->job.work = chunk_work;
	c->job.done = chunk_done;
	ferry__offload_submit(c->rt->disk, &c->job);
}

/* The marker's decimal size, strictly. */
static int parse_size(const char *p, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 20 || (p[0] == '0' && n > 1))
		return -EPROTO;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9' || v > (UINT64_MAX - 9) / 10)
			return -EPROTO;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = v;
	return 0;
}

static int open_tmp(struct rt_code *c)
{
	char dir[PATH_MAX], tmp[PATH_MAX];

	if (cache_dir(c->rt, dir, sizeof(dir)) < 0 || cache_file(c, ".tmp", tmp, sizeof(tmp)) < 0)
		return -ENAMETOOLONG;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	c->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	return c->fd < 0 ? -errno : 0;
}

/* The marker: the library's size, then its chunks. Loop thread. */
static void on_marker(void *arg, int status, void *result)
{
	struct rt_code *c = arg;
	int ret = status;

	if (c->rt->stopping) {
		ferry_gcs_free(result);
		fetch_done(c, -ECANCELED, "the node stops");
		return;
	}
	if (status == -ENOENT) {
		char why[512], node[FERRY_ID_HEX_MAX];

		ferry_node_id_to_hex(&c->rt->node->id, node, sizeof(node));
		snprintf(why, sizeof(why),
			 "node %s lacks the job's code, and the GCS has no code of sha256 %s", node,
			 c->hex);
		fetch_done(c, -ENOENT, why);
		return;
	}
	if (ret >= 0)
		ret = parse_size(result, (size_t)status, &c->size);
	ferry_gcs_free(result);
	if (ret == 0 && c->size > FERRY__CODE_MAX_BYTES)
		ret = -EFBIG;
	if (ret < 0) {
		fetch_failed(c, ret,
			     ret == -EPROTO ? "its size record is malformed" : ferry_strerror(ret));
		return;
	}
	ret = open_tmp(c);
	if (ret < 0) {
		fetch_failed(c, ret, "cannot write to the node's cache");
		return;
	}
	c->got = 0;
	c->chunk = 0;
	ferry__sha256_init(&c->sha);
	if (c->size == 0)
		fetch_finish(c);
	else
		fetch_next(c);
}

/* Start fetching @c (its requests are parked already). */
static void fetch_start(struct rt_code *c)
{
	int ret;

	c->state = CODE_FETCHING;
	ret = cache_file(c, "", c->path, sizeof(c->path));
	if (ret == 0)
		ret = ferry_gcs_kv_get_async(c->rt->node->gcs, FERRY__CODE_NS,
					     strlen(FERRY__CODE_NS), c->hex, HEX_LEN, on_marker, c);
	if (ret < 0)
		fetch_failed(c, ret, ferry_strerror(ret));
}

/* Disk helper: does the named library, else the cached copy, hash to the job's hash? */
static int check_work(struct ferry__offload_job *job)
{
	struct rt_code *c = of_job(job);

	c->matched = file_matches(c->named, c->hash) ? 1 : file_matches(c->path, c->hash) ? 2 : 0;
	return 0;
}

/* Loop thread: a file that matched is the one workers load; else fetch from the GCS. */
static void check_done(struct ferry__offload_job *job, int status)
{
	struct rt_code *c = of_job(job);

	if (status == -ECANCELED || c->rt->stopping) {
		fetch_done(c, -ECANCELED, "the node stops");
		return;
	}
	if (c->matched == 1)
		snprintf(c->path, sizeof(c->path), "%s", c->named);
	if (c->matched) {
		c->state = CODE_READY;
		release(c, 0, NULL);
		return;
	}
	/* A cache file that does not match is replaced by the fetch's rename. */
	fetch_start(c);
}

static int disk_helper(struct ferry__node_rt *rt)
{
	return rt->disk ? 0 : ferry__offload_create(rt->node->loop, "ferry-node-disk", &rt->disk);
}

int ferry__rt_code_resolve(struct ferry__node_rt *rt, struct rt_req *req)
{
	struct rt_code *c;
	int ret;

	/* No SHA-256 to check: the worker refuses the assignment and says why. */
	if (!req->code_path || req->code_hash_len != FERRY_SHA256_SIZE)
		return 0;
	c = find(rt, req->code_hash);
	if (!c && !(c = code_new(rt, req->code_hash)))
		return -ENOMEM;
	req->code = c;
	if (c->state == CODE_READY)
		return 0;
	if (c->state == CODE_NONE) {
		ret = disk_helper(rt);
		if (ret == 0 && snprintf(c->named, sizeof(c->named), "%s", req->code_path) >=
					(int)sizeof(c->named))
			ret = -ENAMETOOLONG;
		if (ret == 0)
			ret = cache_file(c, "", c->path, sizeof(c->path));
		if (ret < 0)
			return ret;
		c->state = CODE_CHECKING;
		c->job.work = check_work;
		c->job.done = check_done;
		ferry__offload_submit(rt->disk, &c->job);
	}
	park(c, req);
	return 1;
}

const char *ferry__rt_code_path(const struct rt_req *req)
{
	return req->code && req->code->state == CODE_READY ? req->code->path : req->code_path;
}

int ferry__rt_code_retry(struct ferry__node_rt *rt, struct rt_req *req, int status)
{
	struct rt_code *c = req->code;

	if (!c || req->code_retried || rt->stopping || (status != -EBADMSG && status != -ENOENT))
		return 0;
	req->code_retried = true;
	FLOG_WARN(COMP,
		  "runtime: the copy of the job's code %s at %s is not usable (%s): "
		  "fetching it again",
		  c->hex, c->path, ferry_strerror(status));
	park(c, req);
	if (c->state == CODE_NONE || c->state == CODE_READY)
		fetch_start(c); /* else a check or a fetch is out: it takes this one along */
	return 1;
}

void ferry__rt_code_peer_gone(struct ferry__node_rt *rt, struct rt_peer *p)
{
	for (struct rt_code *c = rt->codes; c; c = c->next)
		for (struct rt_req *req = c->waiting; req; req = req->next)
			if (req->owner == p)
				req->owner = NULL;
}

uint32_t ferry__rt_code_parked(const struct ferry__node_rt *rt)
{
	return rt->code_parked;
}

/* Remove the cache directory: only the files this code names ("<64 hex>.so[.tmp]"). */
static void remove_cache(struct ferry__node_rt *rt)
{
	char dir[PATH_MAX], path[PATH_MAX + 300];
	struct dirent *e;
	DIR *d;

	if (cache_dir(rt, dir, sizeof(dir)) < 0 || !(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);

		if (n < HEX_LEN + 3 || strspn(e->d_name, "0123456789abcdef") != HEX_LEN ||
		    strncmp(e->d_name + HEX_LEN, ".so", 3))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

void ferry__rt_code_stop(struct ferry__node_rt *rt)
{
	ferry__offload_destroy(rt->disk); /* each job's callback runs here, -ECANCELED */
	rt->disk = NULL;
}

void ferry__rt_code_free(struct ferry__node_rt *rt)
{
	struct rt_code *c;
	struct rt_req *req;

	while ((c = rt->codes)) {
		rt->codes = c->next;
		fetch_end_file(c);
		while ((req = c->waiting)) {
			c->waiting = req->next;
			ferry__rt_req_free(req);
		}
		ferry__free(c);
	}
	rt->code_parked = 0;
	remove_cache(rt);
}
