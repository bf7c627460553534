/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-nodesim's measuring and command line: the GCS's CPU and memory from /proc, the heartbeat
 * round-trip quantiles, the report line bench/compare parses, and the flags.
 */
#include "tools/nodesim.h"

/* ---- /proc ---- */

/* utime + stime of @pid in clock ticks, or 0 when unreadable. */
uint64_t proc_cpu_ticks(int pid)
{
	unsigned long long ut = 0, st = 0;
	char path[64], buf[1024], *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The command name may hold spaces and parentheses: fields restart after the last ')'.
	 * Then: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime. */
	p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return ut + st;
}

long proc_rss_kib(int pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

uint64_t self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* The @q quantile (0..1) of the RTT histogram in ms (bucket's upper edge), 0 with no samples. */
double rtt_quantile(const struct sim *sim, double q)
{
	uint64_t want = (uint64_t)(q * (double)sim->rtt_n), seen = 0;

	if (!sim->rtt_n)
		return 0;
	for (uint32_t b = 0; b < RTT_BUCKETS; b++) {
		seen += sim->rtt[b];
		if (seen > want)
			return (double)(b + 1) * RTT_BUCKET_US / 1000.0;
	}
	return (double)RTT_BUCKETS * RTT_BUCKET_US / 1000.0;
}

/* ---- report ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Death detection times (kill to an observer's DEAD event), ms: quantiles into @q[3] (p50, p99,
 * max); returns how many killed nodes were seen dead, *@unseen those that were not. */
static uint32_t death_quantiles(const struct sim *sim, double q[3], uint32_t *unseen)
{
	uint64_t *ms = ferry__malloc(sizeof(*ms) * (sim->killed + 1u));
	uint32_t n = 0;

	q[0] = q[1] = q[2] = 0;
	*unseen = 0;
	for (uint32_t i = 0; i < sim->o.nodes; i++) {
		const struct sim_node *node = &sim->nodes[i];

		if (node->state != NODE_KILLED)
			continue;
		if (!node->dead_seen_ns)
			(*unseen)++;
		else if (ms)
			ms[n++] = (node->dead_seen_ns - node->kill_ns) / 1000u;
	}
	if (n) {
		qsort(ms, n, sizeof(*ms), cmp_u64);
		q[0] = (double)ms[n / 2] / 1000.0;
		q[1] = (double)ms[(uint32_t)((double)n * 0.99) < n ? (uint32_t)((double)n * 0.99)
								   : n - 1] /
		       1000.0;
		q[2] = (double)ms[n - 1] / 1000.0;
	}
	ferry__free(ms);
	return n;
}

static double per_s(const struct sim *sim, uint64_t v)
{
	return sim->steady_ns ? (double)v * 1e9 / (double)sim->steady_ns : 0;
}

/* Load report bytes on the wire in the window: the reports the nodes sent and the scheduler's
 * load deliveries. */
static uint64_t load_bytes(const struct sim_counts *a, const struct sim_counts *b)
{
	return b->load_bytes - a->load_bytes + b->load_rx_bytes - a->load_rx_bytes;
}

void report(const struct sim *sim)
{
	const struct sim_counts *a = &sim->c0, *b = &sim->c1;
	double secs = (double)sim->steady_ns / 1e9, dq[3];
	double gcs_cpu = 0, self_cpu = 0;
	uint32_t seen, unseen;

	if (sim->o.gcs_pid && secs > 0)
		gcs_cpu = 100.0 * (double)(sim->gcs_ticks1 - sim->gcs_ticks0) /
			  (double)sysconf(_SC_CLK_TCK) / secs;
	if (secs > 0)
		self_cpu = 100.0 * (double)(sim->self_us1 - sim->self_us0) / 1e6 / secs;
	seen = death_quantiles(sim, dq, &unseen);
	printf("NODESIM nodes=%u registered=%u up=%u lost=%u join_s=%.2f steady_s=%.2f "
	       "gcs_cpu_pct=%.2f gcs_rss_mib=%.1f sim_cpu_pct=%.1f deliveries_per_s=%.0f "
	       "publish_bytes_per_s=%.0f hb_per_s=%.0f hb_bytes_per_s=%.0f hb_skipped_per_s=%.0f "
	       "hb_refused=%llu hb_rtt_p50_ms=%.2f hb_rtt_p99_ms=%.2f kills=%u dead_seen=%u "
	       "dead_unseen=%u false_dead=%u false_dead_joining=%u death_detect_ms_p50=%.1f "
	       "death_detect_ms_p99=%.1f "
	       "death_detect_ms_max=%.1f load_bytes_per_s=%.0f load_reports_per_s=%.0f "
	       "load_deliveries_per_s=%.0f beat_ms=%u status=%d\n",
	       sim->o.nodes, sim->registered, sim->up, sim->lost, (double)sim->join_ns / 1e9, secs,
	       gcs_cpu, sim->gcs_rss_kib > 0 ? (double)sim->gcs_rss_kib / 1024.0 : 0, self_cpu,
	       per_s(sim, b->deliveries - a->deliveries),
	       per_s(sim, b->publish_bytes - a->publish_bytes), per_s(sim, b->hb_sent - a->hb_sent),
	       per_s(sim, b->hb_bytes - a->hb_bytes), per_s(sim, b->hb_skipped - a->hb_skipped),
	       (unsigned long long)(b->hb_refused - a->hb_refused), rtt_quantile(sim, 0.5),
	       rtt_quantile(sim, 0.99), sim->killed, seen, unseen, sim->false_dead,
	       sim->false_dead_joining, dq[0], dq[1], dq[2], per_s(sim, load_bytes(a, b)),
	       per_s(sim, b->load_sent - a->load_sent), per_s(sim, b->load_rx - a->load_rx),
	       round_ticks(sim) * TICK_MS, sim->status);
	fflush(stdout);
}

/* ---- command line ---- */

void usage(FILE *to)
{
	fprintf(to,
		"usage: ferry-nodesim --gcs HOST:PORT --token-file F [--nodes N] [--gcs-pid PID]\n"
		"         [--heartbeat-ms MS] (100, node.c's default) [--connect-batch N] (32)\n"
		"         [--connect-timeout-s S] (120) [--settle-s S] (3) [--steady-s S] (10)\n"
		"         [--kills N] (20) [--kill-gap-ms MS] (137) [--drain-s S] (10)\n"
		"         [--observers N] (2) [--load-change-ms MS] (0: idle, load never changes)\n"
		"         [--subscribers N] (0: the first N nodes also follow every join)\n"
		"         [--fixed-interval 0|1] (0: the interval grows with the cluster)\n"
		"         [--peers K] (8: each node follows K peers' keys)\n"
		"Simulates N nodes against a running ferry-gcs; prints one NODESIM key=value "
		"line.\n");
}

static int parse_addr(const char *v, struct sim_opts *o)
{
	static char host[256];
	const char *colon = strrchr(v, ':');
	uint32_t port;

	if (!colon || (size_t)(colon - v) >= sizeof(host) ||
	    ferry__parse_u32(colon + 1, 65535, &port) < 0 || !port)
		return -EINVAL;
	memcpy(host, v, (size_t)(colon - v));
	host[colon - v] = 0;
	o->host = host;
	o->port = (uint16_t)port;
	return 0;
}

/* The numeric flags: name and where its value goes. */
static uint32_t *num_flag(struct sim_opts *o, const char *a)
{
	static const struct {
		const char *name;
		size_t off;
	} flags[] = {
		{"--nodes", offsetof(struct sim_opts, nodes)},
		{"--heartbeat-ms", offsetof(struct sim_opts, heartbeat_ms)},
		{"--connect-batch", offsetof(struct sim_opts, connect_batch)},
		{"--connect-timeout-s", offsetof(struct sim_opts, connect_timeout_s)},
		{"--settle-s", offsetof(struct sim_opts, settle_s)},
		{"--steady-s", offsetof(struct sim_opts, steady_s)},
		{"--kills", offsetof(struct sim_opts, kills)},
		{"--kill-gap-ms", offsetof(struct sim_opts, kill_gap_ms)},
		{"--drain-s", offsetof(struct sim_opts, drain_s)},
		{"--observers", offsetof(struct sim_opts, observers)},
		{"--load-change-ms", offsetof(struct sim_opts, load_change_ms)},
		{"--subscribers", offsetof(struct sim_opts, subscribers)},
		{"--fixed-interval", offsetof(struct sim_opts, fixed_interval)},
		{"--peers", offsetof(struct sim_opts, peers)},
	};

	for (size_t i = 0; i < FERRY_ARRAY_SIZE(flags); i++)
		if (!strcmp(a, flags[i].name))
			return (uint32_t *)((char *)o + flags[i].off);
	return NULL;
}

int parse_args(int argc, char **argv, struct sim_opts *o)
{
	const char *token_file = NULL;
	uint32_t *num, pid;
	int ret;

	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v) {
			fprintf(stderr, "ferry-nodesim: %s needs a value\n", a);
			return -EINVAL;
		}
		if ((num = num_flag(o, a)) && ferry__parse_u32(v, 10000000u, num) == 0)
			continue;
		if (!strcmp(a, "--gcs") && parse_addr(v, o) == 0)
			continue;
		if (!strcmp(a, "--token-file")) {
			token_file = v;
			continue;
		}
		if (!strcmp(a, "--gcs-pid") && ferry__parse_u32(v, INT32_MAX, &pid) == 0) {
			o->gcs_pid = (int)pid;
			continue;
		}
		fprintf(stderr, "ferry-nodesim: bad argument %s %s\n", a, v);
		return -EINVAL;
	}
	if (!o->host || !token_file || !o->nodes || !o->heartbeat_ms || !o->connect_batch) {
		fprintf(stderr, "ferry-nodesim: --gcs, --token-file and a --nodes, --heartbeat-ms, "
				"--connect-batch above 0 are required\n");
		return -EINVAL;
	}
	if (o->subscribers > o->nodes)
		o->subscribers = o->nodes;
	if (o->observers >= o->nodes)
		o->observers = o->nodes > 1 ? o->nodes - 1 : 1;
	ret = ferry__token_read(token_file, o->token, sizeof(o->token));
	if (ret < 0)
		return ret;
	o->token_len = (size_t)ret;
	return 0;
}

/* 10,000 nodes are 10,000 sockets: take the hard limit on descriptors. */
