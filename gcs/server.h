/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server: the GCS state (gcs/state.h) and the pub/sub engine (gcs/pubsub.h) served over
 * framed TCP connections (common/conn.h) on one io_uring loop. ferry-gcs (gcs/main.c) is a thin
 * shell around it; tests may run it in process too.
 *
 * Thread model: not thread-safe; everything runs on the loop's thread (create before the loop
 * runs or on it).
 */
#ifndef FERRY_GCS_SERVER_H
#define FERRY_GCS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/loop.h"
#include "gcs/codec.h"

#define FERRY__GCS_DEFAULT_DEADLINE_MS 1000 /* a node silent this long is dead */
/* Subscriptions one connection may hold; past it a subscribe gets -ENOSPC. */
#define FERRY__GCS_DEFAULT_MAX_SUBSCRIPTIONS 10000u

/* Options; zeros are the defaults except the token. */
struct ferry__gcs_server_opts {
	const char *host;	    /* listen address, NULL = "127.0.0.1" */
	uint16_t port;		    /* 0 = any free port */
	const void *token;	    /* cluster token (copied), required */
	size_t token_len;	    /* its bytes, > 0 */
	const char *wal_dir;	    /* NULL: in memory only */
	uint32_t shard_index;	    /* this server's object directory shard */
	uint32_t shard_count;	    /* shards in all, 0 = 1 */
	uint32_t node_deadline_ms;  /* 0 = FERRY__GCS_DEFAULT_DEADLINE_MS */
	uint32_t max_message_bytes; /* largest request, 0 = 4 MiB */
	size_t max_subscriptions;   /* per connection, 0 = FERRY__GCS_DEFAULT_MAX_SUBSCRIPTIONS */
	size_t max_buffered_bytes;  /* per connection (pub/sub queue and socket), 0 = 8 MiB */
	const char *shard0_address; /* shards > 0: "host:port" of shard 0, whose node deaths drop
				       copies here too; NULL = not followed */
	/* Against clients that do not read, stall or flood (common/conn.h; 0 = its defaults) */
	size_t max_queued_bytes;       /* unsent bytes before a client's requests wait */
	unsigned stall_timeout_ms;     /* a client over that for this long is dropped */
	unsigned frame_timeout_ms;     /* a frame begun and nothing more for this long */
	unsigned handshake_timeout_ms; /* a connection without its Handshake this long */
	unsigned max_handshaking;      /* connections in their handshake at once */
	unsigned bind_retry_ms;	       /* retry a bind that finds the port in use */
	unsigned max_clients;	       /* connections past their handshake at once; one more is
					  refused (-EUSERS); 0 = ferry__conn_server_fd_room() */
};

/*
 * The busy-poll window ferry-gcs gives its loop (struct ferry__loop_opts.spin_us; --spin-us).
 * A sleeping server pays a wake-up per request: on these machines ~20 us of CPU and most of a
 * lone client's round trip (Redis pays the same in epoll_wait). Polling 30 us after the last
 * completion catches a client's next request while the loop is still awake: a 1-client
 * unpipelined KV round trip went from ~16k to ~50k ops/s, and the server's CPU per request
 * fell (19 against 24 us), because a spin is cheaper than a sleep and a wake-up. An idle
 * server still sleeps; under load the loop never sleeps anyway. 10 us was too short for the
 * client's turn-around here; 50 and 100 us gained nothing more. 0 = always sleep.
 */
#define FERRY_GCS_SPIN_US 30u

struct ferry__gcs_server;

/*
 * ferry__gcs_server_create() - open the state (restoring @opts->wal_dir) and listen. Returns 0,
 * -EINVAL (bad options, logged), -ENOMEM, -EADDRINUSE, or the WAL's error.
 */
int ferry__gcs_server_create(struct ferry__loop *loop, const struct ferry__gcs_server_opts *opts,
			     struct ferry__gcs_server **out);
uint16_t ferry__gcs_server_port(const struct ferry__gcs_server *srv);
/* The client limit in force (opts.max_clients, or its default). */
unsigned ferry__gcs_server_max_clients(const struct ferry__gcs_server *srv);

/*
 * ferry__gcs_server_destroy() - close every connection and free the server. Connections close
 * asynchronously, so call it only after ferry__loop_destroy() (which ends them) or from a loop
 * that will never run again. NULL is a no-op.
 */
void ferry__gcs_server_destroy(struct ferry__gcs_server *srv);

/*
 * ferry__gcs_record_encode() - @record as published on @channel (a struct ferry__gcs_node, _job,
 * _worker, _actor, _error or ferry__objdir_entry) in the gcs/ops.h encoding (a RESTORE_* record,
 * ERROR for errors), appended to @out; @scratch is a work buffer. 0, -ENOMEM, -EINVAL.
 */
int ferry__gcs_record_encode(int channel, const void *record, struct ferry__gcs_buf *scratch,
			     struct ferry__gcs_buf *out);

/* ferry__gcs_request_check() - the server's request decoder alone (fuzz target): 0 if @payload
 * is a valid message of @type for a GCS server, else -EPROTO. */
int ferry__gcs_request_check(uint16_t type, const void *payload, size_t len);

#endif
