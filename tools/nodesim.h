/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-nodesim's own header: the simulation's state, shared by ferry-nodesim.c (the nodes,
 * the loop, the phases) and nodesim_report.c (/proc readings, the report, the command line).
 */
#ifndef FERRY_TOOLS_NODESIM_H
#define FERRY_TOOLS_NODESIM_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "common/wire.h"
#include "gcs/liveness.h"
#include "gcs/ops.h"

#define COMP "nodesim"
#define TICK_MS 10u
#define RTT_BUCKET_US 100u  /* heartbeat round trip histogram resolution */
#define RTT_BUCKETS 100000u /* 10 s at 0.1 ms; longer ones land in the last bucket */
#define ID_PREFIX_BYTES 12u /* node ID: random prefix, then the index (u32 LE) */

enum node_state {
	NODE_IDLE,    /* not connected yet */
	NODE_JOINING, /* connecting, handshake, or registration unanswered */
	NODE_UP,      /* registered: heartbeating */
	NODE_KILLED,  /* closed by us on purpose: should be declared dead */
	NODE_LOST,    /* closed by the GCS or an error */
};

/* Request kinds, in the low bits of a seq (seq = counter << 2 | kind). */
enum req_kind { REQ_REGISTER = 0, REQ_SUBSCRIBE = 1, REQ_HEARTBEAT = 2 };

struct sim;

struct sim_node {
	struct sim *sim;		     /* owner */
	struct ferry__conn *conn;	     /* NULL before connect and after close */
	struct ferry_node_id id;	     /* prefix + index */
	struct ferry__wire_unique_id client; /* its client ID (the server deduplicates by it) */
	uint64_t next_seq;		     /* request counter */
	uint64_t hb_sent_ns;		     /* the heartbeat in flight was sent then; 0: none */
	uint64_t kill_ns;		     /* killed then (NODE_KILLED) */
	uint64_t dead_seen_ns;		     /* an observer saw its DEAD event then; 0: not yet */
	uint8_t state;			     /* enum node_state */
	bool connected;			     /* past the handshake */
	bool scheduler;			     /* the load subscriber, not a node */
	bool load_due;			     /* the next beat reports load */
	uint64_t load_version;		     /* of its last report */
	uint64_t load_at_ns;		     /* its load last changed then */
};

struct sim_opts {
	const char *host;	     /* ferry-gcs address */
	uint16_t port;		     /* its port */
	char token[FERRY_TOKEN_MAX]; /* cluster token */
	size_t token_len;	     /* its bytes */
	uint32_t nodes;		     /* simulated nodes */
	uint32_t heartbeat_ms;	     /* node.c's default: 100 */
	uint32_t connect_batch;	     /* connects in handshake at once */
	uint32_t connect_timeout_s;  /* give up joining after this */
	uint32_t settle_s;	     /* after joining, before measuring */
	uint32_t steady_s;	     /* the measured window */
	uint32_t kills;		     /* nodes killed after the window */
	uint32_t kill_gap_ms;	     /* between kills */
	uint32_t drain_s;	     /* wait this long at most for the DEAD events */
	uint32_t observers;	     /* nodes that decode events */
	uint32_t subscribers;	     /* nodes also on the whole nodes channel (the first ones) */
	uint32_t load_change_ms;     /* a node's load changes this often; 0: idle, never */
	uint32_t fixed_interval;     /* 1: --heartbeat-ms at any size (before liveness.h) */
	uint32_t peers;		     /* each node follows this many peers' keys */
	int gcs_pid;		     /* for /proc CPU and RSS; 0: not measured */
};

/* Counters; the steady window's figures are differences of two snapshots. */
struct sim_counts {
	uint64_t deliveries;	/* pub/sub items received, all nodes */
	uint64_t publish_bytes; /* GcsPublish payload bytes received */
	uint64_t hb_sent;	/* heartbeats sent */
	uint64_t hb_bytes;	/* their payload bytes */
	uint64_t hb_acked;	/* answered */
	uint64_t hb_refused;	/* answered with an error */
	uint64_t hb_skipped;	/* due while one was in flight */
	uint64_t load_sent;	/* load reports sent (they count as heartbeats too) */
	uint64_t load_bytes;	/* their payload bytes */
	uint64_t load_rx;	/* load deliveries to the scheduler's subscription */
	uint64_t load_rx_bytes; /* their GcsPublish payload bytes */
};

enum phase { PH_JOIN, PH_SETTLE, PH_STEADY, PH_KILL, PH_DRAIN, PH_DONE };

struct sim {
	struct sim_opts o;		    /* options */
	struct ferry__loop *loop;	    /* the loop */
	struct sim_node *nodes;		    /* o.nodes of them, then the scheduler */
	uint8_t id_prefix[ID_PREFIX_BYTES]; /* shared by every node ID */
	struct ferry__loop_timer tick;	    /* TICK_MS */
	struct ferry__gcs_buf rec;	    /* reused op record */
	struct ferry__fb_builder fb;	    /* reused message builder */
	uint64_t tick_count;		    /* heartbeat buckets walked so far */
	uint64_t start_ns;		    /* the tick's clock starts here */
	enum phase phase;		    /* where we are */
	uint64_t phase_ns;		    /* when it began */
	uint32_t next_connect;		    /* next node index to connect */
	uint32_t handshaking;		    /* connects in flight (not yet up) */
	uint32_t registering;		    /* up, registration unanswered */
	uint32_t up;			    /* registered and open */
	uint32_t gcs_alive;		    /* the alive count of the last beat reply; 0: none */
	uint32_t registered;		    /* registrations answered ok, ever */
	uint32_t lost;			    /* closed unexpectedly */
	uint32_t killed;		    /* killed so far */
	uint32_t false_dead;		    /* DEAD seen for a node we did not kill */
	uint32_t false_dead_joining;	    /* of those, seen before the steady window */
	uint64_t join_ns;		    /* joining took this long */
	struct sim_counts c;		    /* running counters */
	struct sim_counts c0;		    /* at the start of the steady window */
	struct sim_counts c1;		    /* at its end */
	uint64_t gcs_ticks0, gcs_ticks1;    /* GCS utime + stime at the window's ends */
	uint64_t self_us0, self_us1;	    /* our own CPU, same */
	uint64_t steady_ns;		    /* the window's length, as measured */
	long gcs_rss_kib;		    /* at the end of the window */
	uint32_t *rtt;			    /* heartbeat RTT histogram (RTT_BUCKETS) */
	uint64_t rtt_n;			    /* samples in it */
	int status;			    /* 0, or why we stopped early */
};

uint64_t proc_cpu_ticks(int pid);
long proc_rss_kib(int pid);
uint64_t self_cpu_us(void);
/* The @q quantile (0..1) of the RTT histogram in ms (bucket's upper edge), 0 with no samples. */
double rtt_quantile(const struct sim *sim, double q);
/* Ticks per heartbeat round: node.c's interval for the alive count of the last beat reply. */
uint32_t round_ticks(const struct sim *sim);
/* The figures of a finished run: the NODESIM line (bench/compare parses it) and a summary. */
void report(const struct sim *sim);
void usage(FILE *to);
int parse_args(int argc, char **argv, struct sim_opts *o);

#endif
