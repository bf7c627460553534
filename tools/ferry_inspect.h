/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the `ferry` command reads from the nodes themselves (issue 25): a blocking line to a
 * node's runtime endpoint (ferry_node_query.c), and the commands built on it
 * (ferry_inspect.c): the store and transfer figures of `ferry status`, `ferry list objects`,
 * `ferry memory` and `ferry timeline`.
 *
 * Thread model: one thread (a command-line program).
 */
#ifndef FERRY_TOOLS_FERRY_INSPECT_H
#define FERRY_TOOLS_FERRY_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/gcs.h>

#include "common/fb.h"
#include "common/frame.h"

/* A line to one node. */
struct ferry__cli_node {
	int fd;				   /* its socket, -1: none */
	struct ferry__frame_parser parser; /* replies */
	struct ferry__fb_builder fb;	   /* requests */
	uint64_t deadline_ms;		   /* CLOCK_MONOTONIC: every wait ends by then */
	char why[200];			   /* what failed, in the command's words */
};

/* Connect to the node at @address (its advertised text) with the token in @token_path and say
 * RuntimeConnect as a Cli peer; every wait ends @timeout_s from now. 0 or -errno (c->why).
 * Close it with ferry__cli_node_close() either way. */
int ferry__cli_node_open(struct ferry__cli_node *c, const char *address, const char *token_path,
			 unsigned timeout_s);
/* Send what was built into c->fb (@built: the build's result) as @type; wait for a frame of
 * @reply_type: 0 and *@reply (verified; valid until the next call), or -errno (c->why). */
int ferry__cli_node_ask(struct ferry__cli_node *c, uint16_t type, int built, uint16_t reply_type,
			struct ferry__frame *reply);
void ferry__cli_node_close(struct ferry__cli_node *c);

/* A node's figures for `ferry status`. */
struct ferry__cli_figures {
	int status;	   /* 0, or why there are none (-errno; why says it) */
	char why[200];	   /* ... in words */
	uint64_t capacity; /* store bytes */
	uint64_t used;	   /* ... allocated */
	uint64_t objects;  /* ... held (sealed, spilled, being made) */
	uint64_t pinned;   /* objects some client holds */
	uint64_t primary;  /* primary copies (their owner's) */
	uint64_t spilled_objects, spilled_bytes; /* on disk now */
	uint64_t evicted_objects, evicted_bytes; /* since the start */
	uint64_t pulls_in_flight, pulls_ok, pulls_failed, bytes_pulled;
	uint64_t requests_served, bytes_served;
	uint32_t workers_idle, workers_leased, workers_starting, queue_length;
	uint64_t uptime_ms;
};

/* Ask the node at @address for its figures (errors in out->status/why). */
void ferry__cli_figures(const char *address, const char *token_path, unsigned timeout_s,
			struct ferry__cli_figures *out);

/* The inspect commands. @nodes: the GCS's node list (@count); @node: an ID's hex prefix or
 * NULL; @limit 0: no limit. 0, or -errno when nothing could be read (said why). */
int ferry__cli_objects(struct ferry_gcs_client *gcs, const struct ferry_gcs_node_info *nodes,
		       int count, const char *token_path, unsigned timeout_s, const char *node,
		       unsigned limit, bool json, bool memory);
int ferry__cli_timeline(const struct ferry_gcs_node_info *nodes, int count, const char *token_path,
			unsigned timeout_s, const char *node, unsigned limit, const char *out_path);

/* @b bytes for people: "512 B", "1.5 KiB", "64.0 MiB", "2.0 GiB". */
void ferry__cli_size_text(uint64_t b, char *buf, size_t size);

/* @s as a JSON string on stdout (quoted); NULL as null. */
void ferry__cli_json_str(const char *s);

#endif
