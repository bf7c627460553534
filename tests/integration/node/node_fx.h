/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node tests' common start: an in-process GCS and the options of a node that runs the
 * fake worker over TCP on loopback, in the test's temporary directory. Each test sets what it
 * varies (CPUs, workers) on the options, then ferry__node_start().
 */
#ifndef FERRY_TESTS_NODE_FX_H
#define FERRY_TESTS_NODE_FX_H

#include <stdio.h>
#include <string.h>

#include "cluster/embed.h"
#include "node/node.h"
#include "plasma/store.h"
#include "tests/harness/ftest.h"

/* What the options point into: keep it alive until the node started. */
struct node_fx_strings {
	char gcs[64];	/* the GCS's host:port */
	char sock[256]; /* the node's store socket */
};

/* Start a GCS (*@gcs) with @token and fill @o for a node joining it that runs @worker_exe. */
static inline void node_fx_begin(struct ferry__node_opts *o, struct node_fx_strings *s,
				 struct ferry__embed_gcs **gcs, const char *token,
				 const char *worker_exe)
{
	memset(o, 0, sizeof(*o));
	ftest_assert_ok(ferry__embed_gcs_start("127.0.0.1", 0, token, strlen(token), gcs));
	snprintf(s->gcs, sizeof(s->gcs), "127.0.0.1:%u", ferry__embed_gcs_port(*gcs));
	snprintf(s->sock, sizeof(s->sock), "%s/node.sock", ftest_tmpdir());
	o->gcs_address = s->gcs;
	o->token = token;
	o->token_len = strlen(token);
	o->memory_bytes = 64ull << 20;
	o->transport = FERRY__NODE_TRANSPORT_TCP;
	o->ip = "127.0.0.1";
	o->socket_path = s->sock;
	o->store_flags = FERRY__PLASMA_STORE_NO_PREFAULT;
	o->worker_exe = worker_exe;
}

#endif
