/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prometheus metrics (issue 25): counters and histograms that the hot paths bump, and the text
 * exposition format (version 0.0.4) a daemon serves at GET /metrics (common/metrics_http.c).
 *
 * DESIGN
 * - Per thread and lock-free: a counter is FERRY__METRIC_SLOTS cache-line slots; a thread
 *   takes a slot the first time it counts (round robin) and adds to it with a relaxed atomic
 *   add, on a line no other thread writes while there are at most that many threads. A scrape
 *   sums the slots. A histogram is a counter per bucket plus a sum, the same way.
 * - Every counter and histogram is one of the list below (FERRY__METRICS): one definition,
 *   process-wide (two nodes in one test process add into the same ones), each in a group; a
 *   daemon serves the groups it runs (a GCS does not show store rows).
 * - Gauges and the counters a subsystem keeps itself (the store's evictions, spills) are read
 *   at scrape time on the daemon's loop by the collectors it registers: no hot-path cost.
 * - `meson -Dmetrics=false` compiles the bumps out (FERRY_METRICS 0): bench/compare metrics
 *   runs the same benchmarks from both builds to show what they cost.
 *
 * Thread model: bumps from any thread; registration and rendering on the daemon's loop.
 */
#ifndef FERRY_COMMON_METRICS_H
#define FERRY_COMMON_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef FERRY_METRICS
#define FERRY_METRICS 1
#endif

#define FERRY__METRIC_SLOTS 16

/* Groups: which daemons show a metric. */
enum ferry__metric_group {
	FERRY__MG_TRANSFER = 1u << 0, /* the object manager: ferry-node */
	FERRY__MG_GCS = 1u << 1,      /* ferry-gcs */
	FERRY__MG_RUNTIME = 1u << 2,  /* the node's workers and leases: ferry-node */
	FERRY__MG_SCHED = 1u << 3,    /* ferry-sched and the node's local scheduler */
};

/*
 * X(id, group, name, labels, help): counters. Names follow Prometheus' conventions: a unit,
 * _total for counters; rows of one name differ by their labels and are listed together.
 */
#define FERRY__METRICS_COUNTERS(X)                                                                \
	X(pulls_tcp, FERRY__MG_TRANSFER, "ferry_transfer_pulls_total", "transport=\"tcp\"",       \
	  "Pulls into this node's store that ended sealed, by transport")                         \
	X(pulls_rdma, FERRY__MG_TRANSFER, "ferry_transfer_pulls_total", "transport=\"rdma\"", "") \
	X(pulls_shm, FERRY__MG_TRANSFER, "ferry_transfer_pulls_total", "transport=\"shm\"", "")   \
	X(pull_bytes_tcp, FERRY__MG_TRANSFER, "ferry_transfer_pulled_bytes_total",                \
	  "transport=\"tcp\"", "Bytes of the pulls that ended sealed, by transport")              \
	X(pull_bytes_rdma, FERRY__MG_TRANSFER, "ferry_transfer_pulled_bytes_total",               \
	  "transport=\"rdma\"", "")                                                               \
	X(pull_bytes_shm, FERRY__MG_TRANSFER, "ferry_transfer_pulled_bytes_total",                \
	  "transport=\"shm\"", "")                                                                \
	X(pull_fail_missing, FERRY__MG_TRANSFER, "ferry_transfer_pull_failures_total",            \
	  "reason=\"not_found\"", "Pulls that ended in an error, by reason")                      \
	X(pull_fail_timeout, FERRY__MG_TRANSFER, "ferry_transfer_pull_failures_total",            \
	  "reason=\"timeout\"", "")                                                               \
	X(pull_fail_space, FERRY__MG_TRANSFER, "ferry_transfer_pull_failures_total",              \
	  "reason=\"store_full\"", "")                                                            \
	X(pull_fail_peer, FERRY__MG_TRANSFER, "ferry_transfer_pull_failures_total",               \
	  "reason=\"peer\"", "")                                                                  \
	X(pull_fail_canceled, FERRY__MG_TRANSFER, "ferry_transfer_pull_failures_total",           \
	  "reason=\"canceled\"", "")                                                              \
	X(pull_fail_other, FERRY__MG_TRANSFER, "ferry_transfer_pull_failures_total",              \
	  "reason=\"other\"", "")                                                                 \
	X(gcs_mutations, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"mutation\"",          \
	  "Requests the GCS answered, by type")                                                   \
	X(gcs_heartbeats, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"heartbeat\"", "")    \
	X(gcs_loads, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"load_report\"", "")       \
	X(gcs_task_events, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"task_event\"", "")  \
	X(gcs_logs, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"log\"", "")                \
	X(gcs_reads, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"read\"", "")              \
	X(gcs_lookups, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"object_lookup\"", "")   \
	X(gcs_subscribes, FERRY__MG_GCS, "ferry_gcs_requests_total", "type=\"subscribe\"", "")    \
	X(gcs_deliveries, FERRY__MG_GCS, "ferry_gcs_pubsub_deliveries_total", "",                 \
	  "Publications sent to subscribers")                                                     \
	X(gcs_wal_syncs, FERRY__MG_GCS, "ferry_gcs_wal_syncs_total", "",                          \
	  "Write-ahead log syncs (fdatasync) completed")                                          \
	X(leases_granted, FERRY__MG_RUNTIME, "ferry_runtime_leases_granted_total", "",            \
	  "Worker leases this node granted")                                                      \
	X(lease_requests, FERRY__MG_RUNTIME, "ferry_runtime_lease_requests_total", "",            \
	  "Lease requests this node received")                                                    \
	X(tasks_reported, FERRY__MG_RUNTIME, "ferry_runtime_tasks_total", "",                     \
	  "Tasks the owners of returned leases said they ran")                                    \
	X(sched_decisions, FERRY__MG_SCHED, "ferry_sched_decisions_total", "",                    \
	  "Placements decided")                                                                   \
	X(sched_forwards, FERRY__MG_SCHED, "ferry_sched_forwards_total", "",                      \
	  "Tasks forwarded to a scheduler above")                                                 \
	X(sched_refused, FERRY__MG_SCHED, "ferry_sched_refused_total", "",                        \
	  "Placement requests refused (no node could ever run them, or a partial view)")

/* X(id, group, name, help): histograms of seconds (FERRY__METRIC_BUCKETS buckets). */
#define FERRY__METRICS_HISTOGRAMS(X)                                       \
	X(pull_seconds, FERRY__MG_TRANSFER, "ferry_transfer_pull_seconds", \
	  "Time from a pull's request to its end (sealed or failed)")      \
	X(wal_sync_seconds, FERRY__MG_GCS, "ferry_gcs_wal_sync_seconds",   \
	  "Time a write-ahead log sync took")

/* Bucket upper bounds in microseconds: 10 us .. 10 s, and +Inf. */
#define FERRY__METRIC_BUCKETS 14

enum ferry__metric_counter_id {
#define FERRY__X(id, group, name, labels, help) FERRY__MC_##id,
	FERRY__METRICS_COUNTERS(FERRY__X)
#undef FERRY__X
		FERRY__MC_COUNT
};

enum ferry__metric_hist_id {
#define FERRY__X(id, group, name, help) FERRY__MH_##id,
	FERRY__METRICS_HISTOGRAMS(FERRY__X)
#undef FERRY__X
		FERRY__MH_COUNT
};

/* One thread's slot of every counter and histogram: a cache line of its own per thread. */
struct ferry__metric_slot {
	_Alignas(64) atomic_uint_fast64_t counter[FERRY__MC_COUNT];
	atomic_uint_fast64_t bucket[FERRY__MH_COUNT][FERRY__METRIC_BUCKETS];
	atomic_uint_fast64_t sum_us[FERRY__MH_COUNT];
};

extern struct ferry__metric_slot ferry__metric_slots[FERRY__METRIC_SLOTS];
extern _Thread_local int ferry__metric_my_slot; /* 0: not taken yet; else slot + 1 */
int ferry__metric_take_slot(void);

static inline struct ferry__metric_slot *ferry__metric_slot(void)
{
	int s = ferry__metric_my_slot;

	if (__builtin_expect(!s, 0))
		s = ferry__metric_take_slot();
	return &ferry__metric_slots[s - 1];
}

static inline void ferry__metric_add(enum ferry__metric_counter_id id, uint64_t n)
{
#if FERRY_METRICS
	atomic_fetch_add_explicit(&ferry__metric_slot()->counter[id], n, memory_order_relaxed);
#else
	(void)id;
	(void)n;
#endif
}

/* One observation of @us microseconds. */
void ferry__metric_observe_us(enum ferry__metric_hist_id id, uint64_t us);

/* ---- rendering ---- */

/* A growing text buffer (the scrape's reply). */
struct ferry__metric_buf {
	char *data;
	size_t len, cap;
	int err; /* -ENOMEM once an append failed */
};

__attribute__((format(printf, 2, 3))) void ferry__metric_printf(struct ferry__metric_buf *b,
								const char *fmt, ...);
/* A gauge (or a counter kept elsewhere) with its HELP and TYPE lines: @type "gauge"/"counter". */
void ferry__metric_put(struct ferry__metric_buf *b, const char *name, const char *type,
		       const char *help, double value);

/* A daemon's own rows, written at scrape time (on its loop). */
typedef void (*ferry__metric_collector)(struct ferry__metric_buf *b, void *arg);

/* Render the counters and histograms of @groups, then @collect(@b, @arg) if set. */
void ferry__metrics_render(struct ferry__metric_buf *b, unsigned groups,
			   ferry__metric_collector collect, void *arg);

#endif
