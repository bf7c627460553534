/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local cluster (see cluster.h): a GCS and one node of cluster/embed.h put together, with a
 * run directory for the store socket and a token of their own.
 *
 * DESIGN
 * - The GCS runs on its own loop thread (embed.c) and listens on 127.0.0.1 at a free port; the
 *   node's threads are ferry-node's (node/node.c). Both speak to each other and to clients over
 *   the real sockets, so the process behaves as a one-host cluster would.
 * - Stop reverses start: the node first (it deregisters while the GCS still runs), then the GCS,
 *   then the run directory if the cluster made it. The node unlinks its own socket.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <fcntl.h>
#include <unistd.h>

#include <ferry/common.h>

#include "cluster/cluster.h"
#include "cluster/embed.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/token.h"

#define COMP "cluster"
#define RANDOM_TOKEN_BYTES 32
#define SOCKET_PATH_MAX 108 /* sun_path */
#define SOCKET_NAME "/store.sock"
#define WORKER_SOCKET_NAME_MAX sizeof("/w-0123456789abcdef0123456789abcdef.sock")

struct ferry__cluster {
	struct ferry__embed_gcs *gcs;	/* the GCS and its loop thread */
	struct ferry__embed_node *node; /* the node and its store client */
	char gcs_address[32];		/* "127.0.0.1:port" */
	/* holds the store socket, the node's runtime socket beside it ("store.sock.rt") and
	 * its workers' ("w-<worker id>.sock", 39 bytes: the longest name in it) */
	char run_dir[SOCKET_PATH_MAX - WORKER_SOCKET_NAME_MAX];
	char socket_path[SOCKET_PATH_MAX];    /* the store socket */
	int own_run_dir;		      /* 1: made here, removed at stop */
	unsigned char token[FERRY_TOKEN_MAX]; /* the cluster token */
	size_t token_len;		      /* its bytes */
};

/* The token: the caller's, or random bytes written as hex (a token file could hold it). */
static int set_token(struct ferry__cluster *c, const struct ferry__cluster_opts *o)
{
	unsigned char raw[RANDOM_TOKEN_BYTES];

	if (o->token) {
		if (!o->token_len || o->token_len > FERRY_TOKEN_MAX) {
			FLOG_ERROR(COMP, "token of %zu bytes (1..%d)", o->token_len,
				   FERRY_TOKEN_MAX);
			return -EINVAL;
		}
		memcpy(c->token, o->token, o->token_len);
		c->token_len = o->token_len;
		return 0;
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		int err = errno ? -errno : -EIO;

		FLOG_ERROR(COMP, "random token: %s", ferry_strerror(err));
		return err;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf((char *)c->token + 2 * i, 3, "%02x", raw[i]);
	c->token_len = 2 * sizeof(raw);
	return 0;
}

/* The run directory: the caller's, or a fresh one under $TMPDIR (/tmp when that is unset or
 * too long for a socket path under it). */
static int set_run_dir(struct ferry__cluster *c, const struct ferry__cluster_opts *o)
{
	const char *tmp = getenv("TMPDIR");
	int n;

	if (!tmp || !*tmp || strlen(tmp) > 60)
		tmp = "/tmp";
	if (o->run_dir)
		n = snprintf(c->run_dir, sizeof(c->run_dir), "%s", o->run_dir);
	else
		n = snprintf(c->run_dir, sizeof(c->run_dir), "%s/ferry-cluster-XXXXXX", tmp);
	if (n < 0 || (size_t)n >= sizeof(c->run_dir)) {
		FLOG_ERROR(COMP, "run directory path too long for a socket under it");
		return -ENAMETOOLONG;
	}
	if (!o->run_dir) {
		if (!mkdtemp(c->run_dir)) {
			int err = -errno;

			FLOG_ERROR(COMP, "%s: %s", c->run_dir, ferry_strerror(err));
			return err;
		}
		c->own_run_dir = 1;
	}
	snprintf(c->socket_path, sizeof(c->socket_path), "%s" SOCKET_NAME, c->run_dir);
	return 0;
}

static int start_servers(struct ferry__cluster *c, const struct ferry__cluster_opts *o)
{
	struct ferry__embed_node_opts no = {0};
	int ret = ferry__embed_gcs_start("127.0.0.1", 0, c->token, c->token_len, &c->gcs);

	if (ret < 0)
		return ret;
	snprintf(c->gcs_address, sizeof(c->gcs_address), "127.0.0.1:%u",
		 ferry__embed_gcs_port(c->gcs));
	no.gcs = c->gcs_address;
	no.token = c->token;
	no.token_len = c->token_len;
	no.ip = "127.0.0.1";
	no.memory_bytes = o->memory_bytes;
	no.name = "local";
	no.socket_path = c->socket_path;
	no.num_workers = (int32_t)o->num_workers;
	ret = ferry__embed_node_start(&no, &c->node);
	if (ret < 0) {
		ferry__embed_gcs_stop(c->gcs);
		c->gcs = NULL;
	}
	return ret;
}

int ferry__cluster_start(const struct ferry__cluster_opts *opts, struct ferry__cluster **out)
{
	static const struct ferry__cluster_opts defaults;
	const struct ferry__cluster_opts *o = opts ? opts : &defaults;
	struct ferry__cluster *c = ferry__calloc(1, sizeof(*c));
	int ret;

	if (!c)
		return -ENOMEM;
	ret = set_token(c, o);
	if (ret < 0)
		goto err_free;
	ret = set_run_dir(c, o);
	if (ret < 0)
		goto err_free;
	ret = start_servers(c, o);
	if (ret < 0)
		goto err_rmdir;
	FLOG_INFO(COMP, "local cluster: GCS %s, store %s", c->gcs_address, c->socket_path);
	*out = c;
	return 0;
err_rmdir:
	if (c->own_run_dir)
		rmdir(c->run_dir);
err_free:
	ferry__free(c);
	return ret;
}

/* A worker killed by a signal cannot unlink its socket ("w-<id>.sock"): the run directory
 * this cluster made is emptied of those, so that nothing of it is left. */
static void remove_worker_sockets(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "w-", 2) && strstr(e->d_name, ".sock"))
			(void)unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

void ferry__cluster_stop(struct ferry__cluster *c)
{
	if (!c)
		return;
	ferry__embed_node_stop(c->node);
	ferry__embed_gcs_stop(c->gcs);
	if (c->own_run_dir)
		remove_worker_sockets(c->run_dir);
	if (c->own_run_dir && rmdir(c->run_dir) < 0)
		FLOG_WARN(COMP, "remove %s: %s", c->run_dir, ferry_strerror(-errno));
	ferry__free(c);
}

const char *ferry__cluster_store_socket(const struct ferry__cluster *c)
{
	return c->socket_path;
}

const char *ferry__cluster_gcs_address(const struct ferry__cluster *c)
{
	return c->gcs_address;
}

const void *ferry__cluster_token(const struct ferry__cluster *c, size_t *len)
{
	*len = c->token_len;
	return c->token;
}

struct ferry__embed_node *ferry__cluster_node(struct ferry__cluster *c)
{
	return c->node;
}
