/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry: the operator's command. `ferry start --head` runs a GCS and a node on this host in the
 * background, `ferry start --address HOST:PORT` adds a node that joins an existing cluster,
 * `ferry status` lists the cluster's nodes as the GCS sees them, `ferry list` one of the GCS's
 * tables (tools/ferry_list.c), `ferry stop` stops everything this host started;
 * `ferry start --slurm` makes a cluster of a Slurm job's hosts (tools/ferry_slurm.c).
 *
 * DESIGN
 * - Run directory: $FERRY_RUN_DIR, default /tmp/ferry-$UID (mode 0700). It holds `token` (made
 *   by --head when no --token-file is given, mode 0600), `cluster` (the GCS address, the token
 *   file's path and the session, so status and further nodes need no flags), `gcs.pid`, one
 *   `node-N/` per node (pid, store socket, spill directory), `lock`, and the sessions:
 *   `session_DATE_TIME_PID/logs/` (gcs.out/.log, node-N.out/.log: each daemon's stdout, where
 *   its ready line is, and stderr) with `session_latest` pointing at the newest. `node-N` is
 *   claimed with mkdir, so several nodes on one host never share a store, socket or port.
 * - A cluster is never damaged by a command that fails or is refused: start and stop hold the
 *   run directory's lock; `start --head` is refused while a GCS or a node started here still
 *   runs (a GCS that died leaves nodes holding its token: they are named, and `ferry stop`
 *   comes first; a new GCS with a new token would orphan them silently); the new token is
 *   written to a temporary file and renamed to `token` before the daemons start (they are
 *   given that final path), the `token` it replaced kept aside as token.old-PID and put back
 *   if the start fails (a start killed before its end leaves that file: stop and the next
 *   start --head remove it once PID no longer runs); `cluster` is written only once the GCS
 *   and its node are ready.
 *   `start --address` checks first that the GCS answers and takes the token, writes
 *   `cluster` only on success and only where no live cluster has one.
 * - Daemons are started with a double fork and setsid (no controlling terminal, parent init).
 *   start waits for the ready line with a deadline, watching that the process is still alive
 *   and showing a node's store pre-faulting; a daemon that fails prints why and its log's end.
 * - Sessions: a head start, or a node start where no cluster runs, makes a new session; a node
 *   joining the cluster of this run directory logs into its session. stop removes the run
 *   files and keeps the sessions (logs outlive the cluster, as Ray's session logs do).
 * - stop signals nodes first, then the GCS: SIGTERM, wait up to --timeout, then SIGKILL. A pid
 *   is signalled only while /proc says it is still the program we started (pids get reused).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ferry/config.h>
#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "common/loop.h"
#include "common/net.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "node/node.h"
#include "node/resources.h"
#include "tools/ferry_cli.h"
#include "tools/ferry_inspect.h"
#include "transport/objmgr.h"

#define DEFAULT_PORT 6380
#define DEFAULT_TIMEOUT_S 30
/* A node's default store: the store's own default (30% of RAM) but at most a quarter of the
 * memory still available, so each further node on a host fits in what the others left, and at
 * most 4 GiB, which pre-faults in seconds. */
#define DEFAULT_STORE_CAP (4ull << 30)
#define STORE_ROUND (64ull << 20)

static const char usage_text[] =
	"usage: ferry start --head [--port P] [--token-file F] [NODE OPTIONS]\n"
	"       ferry start --address HOST:PORT [--token-file F] [--sched] [--block]\n"
	"                   [NODE OPTIONS]\n"
	"       ferry start --slurm [--port P] [NODE OPTIONS]  (in a Slurm job: the head\n"
	"                   here, a node on each other host of the job; see examples/slurm)\n"
	"       ferry status [--json] [--address HOST:PORT] [--token-file F]\n"
	"       ferry list nodes|objects|tasks|workers|actors|placement-groups|jobs\n"
	"                  [--node ID] [--limit N] [--json] [--address HOST:PORT] [--token-file "
	"F]\n"
	"       ferry memory [--node ID] [--limit N] [--json]  (what each store holds, who\n"
	"                  pins it, where its copies are)\n"
	"       ferry timeline [--node ID] [--limit N] [--output FILE]  (the last transfers\n"
	"                  and leases as Chrome trace JSON: Perfetto, chrome://tracing)\n"
	"       ferry stop\n"
	"       ferry --help | --version\n"
	"NODE OPTIONS: [--memory SIZE] (store size; default 30% of RAM, at most a quarter of the\n"
	"              available memory and 4G) [--transport rdma|tcp|auto] [--ip ADDR|IFACE]\n"
	"              [--spin-us US] (busy poll for latency: ferry-node --spin-us)\n"
	"              [--shm on|off] (off: pulls between nodes on one host take the\n"
	"              network transport, as between hosts)\n"
	"              [--num-cpus N] (default: affinity mask and cgroup quota) [--num-gpus N]\n"
	"              (default 0) [--resources NAME=N,...] (custom, e.g. tpu=4,ssd=0.5)\n"
	"              [--num-workers N] (task workers kept started; default the CPUs, 0: on\n"
	"              demand) [--max-workers M] (default 4 x CPUs) [--worker-idle-ms MS]\n"
	"--head also starts a global scheduler (ferry-sched); --sched one more on this host\n"
	"--sched-group NAME starts group NAME's scheduler here (ferry-sched --group NAME);\n"
	"--group NAME puts this node in that group (its tasks go to that scheduler first)\n"
	"--metrics-port-base P: every daemon serves Prometheus GET /metrics: the GCS on P,\n"
	"              ferry-sched K on P+K, node-N on P+10+N (on --ip)\n"
	"common: [--timeout SECONDS] (start/status/stop deadline, default 30)\n"
	"Run files (pids, token, stores) live in $FERRY_RUN_DIR, default /tmp/ferry-$UID; each\n"
	"cluster's logs in its session_*/logs there (session_latest: the newest), kept by stop.\n";

struct opts {
	bool head;		 /* start --head */
	bool slurm;		 /* start --slurm: the head here, a node on each host of the job */
	bool block;		 /* start --address --block: stay until signalled, then stop it */
	bool port_set;		 /* --port given */
	bool sched;		 /* start --sched: one more ferry-sched here */
	const char *sched_group; /* start --sched-group: a group's ferry-sched here */
	const char *group;	 /* the node's group, passed through (--group) */
	uint16_t port;		 /* GCS port (--head) */
	const char *address;	 /* GCS HOST:PORT to join or ask */
	const char *token_file;	 /* cluster token file */
	const char *memory;	 /* node store size, passed through */
	const char *transport;	 /* rdma, tcp, auto */
	const char *shm;	 /* on, off: pulls over shm from nodes on this host */
	const char *ip;		 /* address to listen on and advertise */
	const char *spin_us;	 /* object manager busy-poll window, passed through */
	const char *num_cpus;	 /* node resources, passed through */
	const char *num_gpus;	 /* same */
	const char *resources;	 /* same: custom name=amount,... */
	const char *num_workers; /* the node's worker pool, passed through */
	const char *max_workers; /* same */
	const char *worker_idle_ms; /* same */
	unsigned timeout_s;	    /* deadlines */
	const char *what;	    /* list: nodes, workers, ... */
	const char *node;	    /* list --node: an ID's hex prefix */
	unsigned limit;		    /* list --limit */
	bool json;		    /* list, status, memory --json */
	bool listing;		    /* the command is list: it takes the kind */
	const char *output;	    /* timeline --output FILE */
};

/* What one start is doing: filled as it goes, undone by start_undo() if it fails. */
struct start {
	struct ferry__cli_cluster cluster;  /* what the cluster file will say */
	struct ferry__cli_token_swap token; /* the `token` it replaced: undo puts it back */
	char logs[PATH_MAX];		    /* the session's log directory */
	char node_dir[PATH_MAX - 32];	    /* the node-N directory of the node it started */
	char listen_ip[64];		    /* where the GCS and ferry-sched listen: listen_ip() */
	pid_t gcs;			    /* a GCS this start spawned */
};

/* ---- stop ---- */

/* Stop the daemon whose pid file is @pid_path. Returns 0, -ENOENT (none recorded), -EBUSY. */
static int stop_one(const char *pid_path, const char *name, unsigned timeout_s)
{
	pid_t pid = ferry__cli_read_pid(pid_path);
	int ret;

	if (!pid)
		return -ENOENT;
	ret = ferry__cli_daemon_stop(pid, name, timeout_s);
	if (ret == 1)
		printf("killed  %-10s pid %d (no exit %u s after SIGTERM)\n", name, (int)pid,
		       timeout_s);
	else if (ret == 0)
		printf("stopped %-10s pid %d\n", name, (int)pid);
	else
		printf("%-10s pid %d was not running\n", name, (int)pid);
	if (ferry__cli_pid_is(pid, name))
		return -EBUSY;
	unlink(pid_path);
	return 0;
}

/* Stop every node, then the GCS, and remove the run files; the sessions' logs stay. */
static int stop_all(unsigned timeout_s)
{
	char dir[PATH_MAX - 32], path[PATH_MAX];
	int failed = 0, stopped = 0, ret;

	/* The other hosts' nodes first (srun forwards the SIGTERM to each --block start there). */
	snprintf(path, sizeof(path), "%s/slurm-step.pid", ferry__cli_run_dir);
	ret = stop_one(path, "srun", timeout_s);
	failed |= ret == -EBUSY;
	stopped += ret == 0;
	if (ret == 0) {
		snprintf(path, sizeof(path), "%s.token", ferry__cli_run_dir);
		unlink(path); /* this host's copy of --slurm's sbcast */
	}
	failed |= ferry__cli_sched_stop_all(timeout_s, &stopped) < 0;
	for (unsigned i = 1; i <= FERRY_CLI_MAX_NODES; i++) {
		snprintf(dir, sizeof(dir), "%s/node-%u", ferry__cli_run_dir, i);
		if (access(dir, F_OK) < 0)
			continue;
		snprintf(path, sizeof(path), "%s/node.pid", dir);
		ret = stop_one(path, "ferry-node", timeout_s);
		failed |= ret == -EBUSY;
		stopped += ret == 0;
		if (ret != -EBUSY)
			ferry__cli_remove_node_dir(dir);
	}
	snprintf(path, sizeof(path), "%s/gcs.pid", ferry__cli_run_dir);
	ret = stop_one(path, "ferry-gcs", timeout_s);
	failed |= ret == -EBUSY;
	stopped += ret == 0;
	if (failed) {
		ferry__cli_fail("some processes could not be stopped; run files kept in %s",
				ferry__cli_run_dir);
		return -EBUSY;
	}
	for (const char *const *f = (const char *const[]){"cluster", "token", NULL}; *f; f++) {
		snprintf(path, sizeof(path), "%s/%s", ferry__cli_run_dir, *f);
		unlink(path); /* token: only ever the generated one lives here */
	}
	ferry__cli_reap_kept_tokens();
	if (!stopped)
		printf("nothing was running from %s\n", ferry__cli_run_dir);
	snprintf(path, sizeof(path), "%s/session_latest", ferry__cli_run_dir);
	if (stopped && access(path, F_OK) == 0)
		printf("logs kept in %s/logs\n", path);
	return 0;
}

static int cmd_stop(const struct opts *o)
{
	int lock, ret;

	if (access(ferry__cli_run_dir, F_OK) < 0) {
		printf("nothing was running from %s\n", ferry__cli_run_dir);
		return 0;
	}
	lock = ferry__cli_run_lock();
	if (lock < 0)
		return lock;
	ret = stop_all(o->timeout_s);
	close(lock);
	return ret;
}

/* ---- start ---- */

/* --ip for the GCS and ferry-sched, which listen on an address or host name: an interface name
 * (ib0, as the nodes take it: node/node_addr.c) becomes its first address (IPv4 first);
 * anything else goes as given; none is every address. */
static void listen_ip(const struct opts *o, char *buf, size_t size)
{
	const struct ferry__net_iface *f = NULL;
	struct ferry__net_iface ifs[64];
	int n;

	if (o->ip && (n = ferry__net_ifaces("/sys", ifs, 64)) > 0)
		f = ferry__net_iface_named(ifs, (size_t)n, o->ip);
	snprintf(buf, size, "%s", f ? f->ip : o->ip ? o->ip : "0.0.0.0");
}

/* ferry_cli.h */
void ferry__cli_advertised_ip(const char *head, char *buf, size_t size)
{
	struct ifaddrs *ifs, *i;
	bool given = strcmp(head, "0.0.0.0") != 0;

	snprintf(buf, size, "%s", given ? head : "127.0.0.1");
	if (given || getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i; i = i->ifa_next) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(void *)i->ifa_addr;

		if (sin && sin->sin_family == AF_INET && ntohl(sin->sin_addr.s_addr) >> 24 != 127) {
			inet_ntop(AF_INET, &sin->sin_addr, buf, (socklen_t)size);
			break;
		}
	}
	freeifaddrs(ifs);
}

static int start_gcs(const struct opts *o, struct start *s, const char *token_path)
{
	char bin[PATH_MAX], port[16], line[256], ip[64], *addr = s->cluster.address;
	const char *host = s->listen_ip;
	struct ferry__cli_daemon d;
	unsigned got;
	char mport[8];
	int ret;

	ret = ferry__cli_find_program("ferry-gcs", "FERRY_GCS_BIN", bin, sizeof(bin));
	if (ret < 0)
		return ret;
	ferry__cli_daemon_paths(&d, "ferry-gcs", ferry__cli_run_dir, "gcs", s->logs, "gcs");
	snprintf(port, sizeof(port), "%u", o->port);
	snprintf(mport, sizeof(mport), "%u", ferry__cli_metrics_base);
	const char *argv[] = {
		bin,	    "--port", port, "--token-file",
		token_path, "--host", host, ferry__cli_metrics_base ? "--metrics-port" : NULL,
		mport,	    NULL};
	ret = ferry__cli_daemon_spawn(&d, argv);
	s->gcs = d.pid;
	if (ret == 0)
		ret = ferry__cli_daemon_wait_ready(&d, "listening on port", o->timeout_s, line,
						   sizeof(line));
	if (ret < 0)
		return ret;
	if (sscanf(line, "ferry-gcs listening on port %u", &got) != 1)
		got = o->port;
	ferry__cli_advertised_ip(host, ip, sizeof(ip));
	snprintf(addr, sizeof(s->cluster.address), "%s:%u", ip, got);
	printf("started ferry-gcs   pid %-7d port %u (log %s)\n", (int)d.pid, got, d.log_path);
	if (ferry__cli_metrics_base)
		printf("  metrics: http://%s:%u/metrics\n", ip, ferry__cli_metrics_base);
	return 0;
}

/* Claim the first free node-N directory. */
static int claim_node_dir(char *dir, size_t size, unsigned *index)
{
	for (unsigned i = 1; i <= FERRY_CLI_MAX_NODES; i++) {
		snprintf(dir, size, "%s/node-%u", ferry__cli_run_dir, i);
		if (mkdir(dir, 0700) == 0) {
			*index = i;
			return 0;
		}
		if (errno != EEXIST)
			break;
	}
	ferry__cli_fail("no free node slot in %s (at most %d nodes per host)", ferry__cli_run_dir,
			FERRY_CLI_MAX_NODES);
	return -ENOSPC;
}

static uint64_t mem_available(void)
{
	char buf[4096], *p;

	if (ferry__cli_read_file("/proc/meminfo", buf, sizeof(buf)) <= 0 ||
	    !(p = strstr(buf, "MemAvailable:")))
		return UINT64_MAX;
	return strtoull(p + 13, NULL, 10) << 10;
}

/* The node's store size: --memory, else the default of DEFAULT_STORE_CAP's comment. */
static uint64_t store_bytes(const struct opts *o, bool *is_default)
{
	uint64_t bytes;

	*is_default = !o->memory;
	if (o->memory && ferry_parse_size(o->memory, &bytes) == 0)
		return bytes;
	bytes = FERRY_MIN(ferry_plasma_default_memory_bytes(), mem_available() / 4);
	bytes = FERRY_MIN(bytes, DEFAULT_STORE_CAP) & ~(STORE_ROUND - 1);
	return FERRY_MAX(bytes, STORE_ROUND);
}

/* Everything after the node's own: the argv for ferry-node. */
static void node_argv(const struct opts *o, const char **argv, unsigned n, const char *memory)
{
	const char *pairs[][2] = {{"--memory", memory},
				  {"--transport", o->transport},
				  {"--shm", o->shm},
				  {"--ip", o->ip},
				  {"--spin-us", o->spin_us},
				  {"--num-cpus", o->num_cpus},
				  {"--num-gpus", o->num_gpus},
				  {"--resources", o->resources},
				  {"--num-workers", o->num_workers},
				  {"--max-workers", o->max_workers},
				  {"--worker-idle-ms", o->worker_idle_ms},
				  {"--group", o->group}};

	for (size_t i = 0; i < FERRY_ARRAY_SIZE(pairs); i++) {
		if (!pairs[i][1])
			continue;
		argv[n++] = pairs[i][0];
		argv[n++] = pairs[i][1];
	}
	argv[n] = NULL;
}

/* The id from a node's ready line ("... id=HEX ...") into @dir/node.id, so `status` can name the
 * store socket of each node this host runs (the GCS knows addresses, not local paths). */
static void record_node_id(const char *dir, const char *ready_line)
{
	const char *id = strstr(ready_line, " id=");
	char path[PATH_MAX], hex[64];
	size_t len;

	if (!id)
		return;
	id += 4;
	len = strcspn(id, " \n");
	if (len == 0 || len >= sizeof(hex))
		return;
	snprintf(hex, sizeof(hex), "%.*s\n", (int)len, id);
	snprintf(path, sizeof(path), "%s/node.id", dir);
	(void)ferry__cli_write_file(path, hex, 0644);
}

static int start_node(const struct opts *o, struct start *s)
{
	char bin[PATH_MAX], dir[PATH_MAX - 32], sock[PATH_MAX], spill[PATH_MAX], line[512];
	char stem[32], memory[32];
	struct ferry__cli_daemon d;
	unsigned index = 0;
	bool is_default;
	char mport[8];
	int ret;

	ret = ferry__cli_find_program("ferry-node", "FERRY_NODE_BIN", bin, sizeof(bin));
	if (ret == 0)
		ret = claim_node_dir(dir, sizeof(dir), &index);
	if (ret < 0)
		return ret;
	snprintf(stem, sizeof(stem), "node-%u", index);
	ferry__cli_daemon_paths(&d, "ferry-node", dir, "node", s->logs, stem);
	d.store_bytes = store_bytes(o, &is_default);
	snprintf(memory, sizeof(memory), "%" PRIu64, d.store_bytes);
	snprintf(sock, sizeof(sock), "%s/store.sock", dir);
	snprintf(spill, sizeof(spill), "%s/spill", dir);
	/* --port 0: a free port, several nodes may share this host. */
	const char *argv[48] = {
		bin,	    "--gcs", s->cluster.address, "--token-file", s->cluster.token,
		"--socket", sock,    "--spill-dir",	 spill,		 "--port",
		"0"};
	node_argv(o, argv, 11, memory);
	if (ferry__cli_metrics_base) {
		size_t k = 11;

		while (argv[k])
			k++;
		snprintf(mport, sizeof(mport), "%u", ferry__cli_metrics_base + 10u + index);
		argv[k++] = "--metrics-port";
		argv[k++] = mport;
		argv[k] = NULL;
	}
	printf("starting ferry-node %s: store %.*f %s%s, pre-faulted before it is ready\n", stem,
	       d.store_bytes < (1ull << 30) ? 0 : 1,
	       (double)d.store_bytes / (d.store_bytes < (1ull << 30) ? (1u << 20) : (1u << 30)),
	       d.store_bytes < (1ull << 30) ? "MiB" : "GiB",
	       is_default ? " (default; --memory SIZE)" : "");
	fflush(stdout);
	ret = ferry__cli_daemon_spawn(&d, argv);
	if (ret == 0)
		ret = ferry__cli_daemon_wait_ready(&d, "ready", o->timeout_s, line, sizeof(line));
	if (ret < 0) {
		if (d.pid > 0)
			ferry__cli_daemon_stop(d.pid, d.name, o->timeout_s);
		unlink(d.pid_path);
		ferry__cli_remove_node_dir(dir);
		return ret;
	}
	printf("started ferry-node  pid %-7d %s: %s (log %s)\n", (int)d.pid, stem, line,
	       d.log_path);
	record_node_id(dir, line);
	snprintf(s->node_dir, sizeof(s->node_dir), "%s", dir);
	return 0;
}

/* A token file path made absolute (daemons run in /) and checked readable. */
static int token_path_abs(const char *given, char *out)
{
	if (!realpath(given, out) || access(out, R_OK) < 0) {
		ferry__cli_fail("token file %s: %s", given, ferry_strerror(errno));
		return -ENOENT;
	}
	return 0;
}

static int read_token(const char *path, char *buf, size_t *len)
{
	int n = ferry__token_read(path, buf, FERRY_TOKEN_MAX); /* logs why it failed */

	if (n < 0)
		return n;
	*len = (size_t)n;
	return 0;
}

/* A GCS client for @address with the token in @token_path; says why when it cannot. */
static int gcs_connect(const char *address, const char *token_path, pid_t local_gcs,
		       unsigned timeout_s, struct ferry_gcs_client **out)
{
	struct ferry_gcs_client_opts co = {0};
	char token[FERRY_TOKEN_MAX];
	const char *addrs[1] = {address};
	int ret;

	ret = ferry__cli_probe_gcs(address, local_gcs, timeout_s);
	if (ret == 0)
		ret = read_token(token_path, token, &co.token_len);
	if (ret < 0)
		return ret;
	co.addresses = addrs;
	co.naddresses = 1;
	co.token = token;
	co.timeout_ms = timeout_s * 1000u;
	co.kind = FERRY_GCS_CLIENT_CLI;
	ret = ferry_gcs_client_connect(&co, out);
	if (ret == -EACCES)
		ferry__cli_fail(
			"the GCS at %s refused the token in %s (bad cluster token: give the "
			"head's token file)",
			address, token_path);
	else if (ret < 0)
		ferry__cli_fail("cannot reach the GCS at %s: %s", address, ferry_strerror(ret));
	return ret;
}

/* The end of the GCS's log in the cluster's session. */
static void print_gcs_log(const struct ferry__cli_cluster *c)
{
	char logs[PATH_MAX], path[PATH_MAX + 16];

	if (!*c->session)
		return;
	ferry__cli_session_logs(c->session, logs, sizeof(logs));
	snprintf(path, sizeof(path), "%s/gcs.log", logs);
	ferry__cli_print_log_tail(path);
}

/* --head: refused while anything this run directory started still runs. */
static int head_allowed(const struct ferry__cli_live *live)
{
	struct ferry__cli_cluster c;

	ferry__cli_cluster_read(&c);
	if (live->gcs_alive) {
		ferry__cli_fail("a GCS started from %s is running already (pid %d, cluster %s): "
				"ferry stop first",
				ferry__cli_run_dir, (int)live->gcs, *c.address ? c.address : "?");
		return -EEXIST;
	}
	if (live->nodes_alive) {
		ferry__cli_fail("the GCS started from %s%s is gone, but %u node%s it started still "
				"run%s (node-%u, pid %d) with its token; a new GCS would orphan "
				"them: `ferry stop`, then `ferry start --head`",
				ferry__cli_run_dir, live->gcs ? "" : " (no pid recorded)",
				live->nodes_alive, live->nodes_alive == 1 ? "" : "s",
				live->nodes_alive == 1 ? "s" : "", live->first_node,
				(int)live->first_node_pid);
		print_gcs_log(&c);
		return -EEXIST;
	}
	return 0;
}

/* --head: a new session, a new token (unless given), the GCS. */
static int start_head(const struct opts *o, struct start *s)
{
	int ret;

	ferry__cli_reap_stale_nodes(); /* head_allowed: none of them runs */
	ferry__cli_reap_kept_tokens();
	ret = ferry__cli_session_create(s->cluster.session, sizeof(s->cluster.session));
	if (ret < 0)
		return ret;
	ferry__cli_session_logs(s->cluster.session, s->logs, sizeof(s->logs));
	if (o->token_file) {
		ret = token_path_abs(o->token_file, s->cluster.token);
		return ret < 0 ? ret : start_gcs(o, s, s->cluster.token);
	}
	/* The daemons are given the final path, which outlives this start (ps shows it, and a
	 * daemon restarted by hand with the same command line finds its token there), so the new
	 * token is in place before they start; a failed start puts the old one back. */
	ret = ferry__cli_token_swap(&s->token, s->cluster.token, sizeof(s->cluster.token));
	return ret < 0 ? ret : start_gcs(o, s, s->cluster.token);
}

/* --address: the token, a GCS that answers and takes it, and the session to log into. */
static int start_joiner(const struct opts *o, struct start *s, const struct ferry__cli_live *live,
			const struct ferry__cli_cluster *here)
{
	struct ferry_gcs_client *c = NULL;
	bool same = !strcmp(here->address, o->address);
	int ret;

	if (o->token_file)
		ret = token_path_abs(o->token_file, s->cluster.token);
	else if (*here->token)
		ret = token_path_abs(here->token, s->cluster.token);
	else {
		ferry__cli_fail(
			"--address needs --token-file (the head's token file, copied here)");
		return -EINVAL;
	}
	if (ret < 0)
		return ret;
	snprintf(s->cluster.address, sizeof(s->cluster.address), "%s", o->address);
	ret = gcs_connect(o->address, s->cluster.token, same ? live->gcs : 0, o->timeout_s, &c);
	ferry_gcs_client_destroy(c);
	if (ret < 0)
		return ret;
	if ((live->gcs_alive || live->nodes_alive) && *here->session) {
		snprintf(s->cluster.session, sizeof(s->cluster.session), "%s", here->session);
	} else {
		ret = ferry__cli_session_create(s->cluster.session, sizeof(s->cluster.session));
		if (ret < 0)
			return ret;
	}
	ferry__cli_session_logs(s->cluster.session, s->logs, sizeof(s->logs));
	return 0;
}

/* A head that failed: stop the GCS it started, put back the token it replaced. */
static void start_undo(const struct opts *o, struct start *s)
{
	char path[PATH_MAX];

	if (s->gcs > 0) {
		fprintf(stderr, "ferry: stopping the GCS again\n");
		ferry__cli_daemon_stop(s->gcs, "ferry-gcs", o->timeout_s);
		snprintf(path, sizeof(path), "%s/gcs.pid", ferry__cli_run_dir);
		unlink(path);
	}
	ferry__cli_token_swap_undo(&s->token);
}

static int start_locked(const struct opts *o, struct start *s)
{
	const char *ip = o->ip ? s->listen_ip : NULL;
	struct ferry__cli_cluster here;
	struct ferry__cli_live live;
	int ret;

	listen_ip(o, s->listen_ip, sizeof(s->listen_ip));
	ferry__cli_run_live(&live);
	ferry__cli_cluster_read(&here);
	ret = o->head ? head_allowed(&live) : 0;
	if (ret == 0)
		ret = o->head ? start_head(o, s) : start_joiner(o, s, &live, &here);
	if (ret == 0)
		ret = start_node(o, s);
	if (ret < 0)
		return ret;
	/* A node joining the live cluster of this directory leaves its cluster file alone. */
	if (o->head || !(live.gcs_alive || live.nodes_alive) || !*here.address)
		ret = ferry__cli_cluster_write(&s->cluster);
	if (ret < 0) {
		ferry__cli_fail("cannot write %s/cluster: %s", ferry__cli_run_dir,
				ferry_strerror(-ret));
		return ret;
	}
	ferry__cli_token_swap_done(&s->token);
	/* The cluster works without one (nodes keep their tasks): a failure is said, not undone. */
	if ((o->head || o->sched) && ferry__cli_sched_start(s->cluster.address, s->cluster.token,
							    ip, NULL, s->logs, o->timeout_s) < 0)
		fprintf(stderr, "ferry: no global scheduler started; nodes keep their tasks\n");
	if (o->sched_group && ferry__cli_sched_start(s->cluster.address, s->cluster.token, ip,
						     o->sched_group, s->logs, o->timeout_s) < 0)
		fprintf(stderr, "ferry: no scheduler for group %s started\n", o->sched_group);
	return 0;
}

/* --block: wait for SIGTERM, SIGINT or SIGHUP (blocked since run()), then stop the node this
 * start started. Its end is said: stopped from elsewhere (its directory gone: a `ferry stop`),
 * 0; died, -ECHILD. */
static int block_until_signal(const struct opts *o, const struct start *s)
{
	struct timespec tick = {.tv_sec = 1};
	char path[PATH_MAX];
	sigset_t set;
	pid_t pid;
	int sig, ret;

	snprintf(path, sizeof(path), "%s/node.pid", s->node_dir);
	pid = ferry__cli_read_pid(path);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	printf("ferry: the node runs until this command gets SIGTERM or SIGINT (--block)\n");
	fflush(stdout);
	while ((sig = sigtimedwait(&set, NULL, &tick)) < 0) {
		if (ferry__cli_pid_is(pid, "ferry-node"))
			continue;
		if (access(s->node_dir, F_OK) < 0) {
			printf("ferry: the node was stopped (ferry stop)\n");
			return 0;
		}
		ferry__cli_fail("the node (pid %d) exited: see its log in %s/logs", (int)pid,
				s->logs);
		return -ECHILD;
	}
	printf("ferry: %s: stopping the node\n", strsignal(sig));
	/* Without the run directory's lock: a `ferry stop` of this directory may hold it while it
	 * waits for this very process (through srun), and stopping our own node touches nothing
	 * another command could be claiming. */
	ret = stop_one(path, "ferry-node", o->timeout_s);
	if (ret != -EBUSY)
		ferry__cli_remove_node_dir(s->node_dir);
	return ret == -EBUSY ? ret : 0;
}

static int start_slurm(const struct opts *o);

static int cmd_start(const struct opts *o)
{
	struct start s = {0};
	int lock, ret;

	if (o->slurm)
		return start_slurm(o);
	lock = ferry__cli_run_lock();
	if (lock < 0)
		return lock;
	ret = start_locked(o, &s);
	if (ret < 0)
		start_undo(o, &s);
	close(lock);
	if (ret < 0)
		return ret;
	if (o->block)
		return block_until_signal(o, &s);
	if (o->head)
		printf("cluster address %s\n"
		       "on other hosts: copy %s there and run\n"
		       "  ferry start --address %s --token-file TOKEN_FILE\n",
		       s.cluster.address, s.cluster.token, s.cluster.address);
	return 0;
}

/* ---- Slurm ---- */

/* Until the GCS at @address lists @want nodes alive (or the srun step @step ends, or the
 * deadline passes: said why). 0 or -errno. */
static int wait_for_nodes(const struct opts *o, const struct start *s, unsigned want, pid_t step)
{
	struct ferry_gcs_client *c = NULL;
	uint64_t deadline = ferry__now_ms() + o->timeout_s * 1000ull;
	unsigned alive = 0;
	int ret;

	ret = gcs_connect(s->cluster.address, s->cluster.token, 0, o->timeout_s, &c);
	while (ret == 0) {
		struct ferry_gcs_node_info *nodes = NULL;
		int n = ferry_gcs_node_list(c, &nodes);

		alive = 0;
		for (int i = 0; i < n; i++)
			alive += nodes[i].state == FERRY_GCS_NODE_ALIVE;
		ferry_gcs_free(nodes);
		if (alive >= want)
			break;
		if (!ferry__cli_pid_is(step, "srun")) {
			ferry__cli_fail(
				"the srun step that starts the other hosts' nodes ended with "
				"%u of %u nodes alive: see %s/slurm-nodes.log",
				alive, want, s->logs);
			ret = -ECHILD;
		} else if (ferry__now_ms() > deadline) {
			ferry__cli_fail("%u of %u nodes alive after %u s (--timeout): see "
					"%s/slurm-nodes.log",
					alive, want, o->timeout_s, s->logs);
			ret = -ETIMEDOUT;
		} else {
			usleep(200 * 1000);
		}
	}
	ferry_gcs_client_destroy(c);
	return ret;
}

/* The head here; the job's other hosts' nodes by one srun step; wait until all are alive. */
static int start_slurm(const struct opts *o)
{
	static char hosts[FERRY_CLI_MAX_HOSTS][FERRY_CLI_HOST_MAX];
	const char *self = getenv("SLURMD_NODENAME");
	char *others[FERRY_CLI_MAX_HOSTS];
	char exe[PATH_MAX], token[PATH_MAX], timeout[16];
	const char *args[48];
	struct opts h = *o;
	struct start s = {0};
	unsigned k = 0, a = 0, mine = 0;
	pid_t step = 0;
	int n, lock, ret;

	n = ferry__cli_slurm_hosts(hosts, FERRY_CLI_MAX_HOSTS);
	if (n < 0)
		return n;
	/* The batch script runs on the job's first host; salloc's shell may run elsewhere. */
	for (int i = 0; i < n; i++)
		if (self && !strcmp(hosts[i], self))
			mine = (unsigned)i;
	for (int i = 0; i < n; i++)
		if ((unsigned)i != mine)
			others[k++] = hosts[i];
	h.head = true;
	h.slurm = false;
	if (!o->port_set)
		h.port = 0; /* two jobs' heads may share a host */
	lock = ferry__cli_run_lock();
	if (lock < 0)
		return lock;
	ret = start_locked(&h, &s);
	if (ret < 0)
		start_undo(&h, &s);
	close(lock);
	if (ret < 0 || k == 0)
		goto out;
	snprintf(token, sizeof(token), "%s.token", ferry__cli_run_dir);
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	ret = len > 0 ? 0 : -errno;
	if (ret == 0) {
		exe[len] = '\0';
		ret = ferry__cli_slurm_bcast(s.cluster.token, token);
	}
	if (ret == 0) {
		snprintf(timeout, sizeof(timeout), "%u", o->timeout_s);
		args[a++] = exe;
		args[a++] = "start";
		args[a++] = "--address";
		args[a++] = s.cluster.address;
		args[a++] = "--token-file";
		args[a++] = token;
		args[a++] = "--block";
		args[a++] = "--timeout";
		args[a++] = timeout;
		node_argv(o, args, a, o->memory); /* the node options, as given */
		char(*list)[FERRY_CLI_HOST_MAX] = malloc(k * sizeof(*list));

		ret = list ? 0 : -ENOMEM;
		for (unsigned i = 0; list && i < k; i++)
			memcpy(list[i], others[i], FERRY_CLI_HOST_MAX);
		if (list)
			ret = ferry__cli_slurm_launch(list, k, args, s.logs, &step);
		free(list);
	}
	if (ret == 0)
		ret = wait_for_nodes(o, &s, k + 1, step);
	if (ret < 0) {
		fprintf(stderr, "ferry: stopping what this start started\n");
		lock = ferry__cli_run_lock();
		if (lock >= 0) {
			(void)stop_all(o->timeout_s);
			close(lock);
		}
	}
out:
	if (ret == 0)
		printf("cluster address %s: %u node%s, on the job's hosts (%s first)\n"
		       "drivers of this job join it with FERRY_ADDRESS=auto; `ferry stop` ends "
		       "it\n",
		       s.cluster.address, k + 1, k ? "s" : "", hosts[mine]);
	return ret;
}

/* ---- status ---- */

static const char *state_name(enum ferry_gcs_node_state s)
{
	switch (s) {
	case FERRY_GCS_NODE_ALIVE:
		return "alive";
	case FERRY_GCS_NODE_DRAINING:
		return "draining";
	case FERRY_GCS_NODE_DEAD:
		return "dead";
	}
	return "?";
}

/* One node's row: its advertised address (ip:tcp port) and the transports it serves (with the
 * RDMA port, which differs from the TCP one). */
static void print_node(const struct ferry_gcs_node_info *n)
{
	const char *text = n->address ? n->address : "";
	struct ferry__node_addr a;
	char id[2 * sizeof(n->id) + 1], where[128] = "", tp[48] = "";
	size_t len;

	ferry_id_to_hex(&n->id, sizeof(n->id), id, sizeof(id));
	if (ferry__node_addr_parse(text, strlen(text), &a) == 0) {
		snprintf(where, sizeof(where), strchr(a.ip, ':') ? "[%s]:%u" : "%s:%u", a.ip,
			 a.tcp_port ? a.tcp_port : a.rdma_port);
		if (a.rdma_port)
			snprintf(tp, sizeof(tp), "rdma:%u,", a.rdma_port);
		len = strlen(tp);
		snprintf(tp + len, sizeof(tp) - len, "%s%s", a.tcp_port ? "tcp," : "",
			 a.shm_path[0] ? "shm," : "");
		if (*tp)
			tp[strlen(tp) - 1] = '\0';
	} else {
		snprintf(where, sizeof(where), "%.100s", text);
	}
	printf("%-12.12s  %-8s  %-22s  %-18s  %8.1f MiB\n", id, state_name(n->state), where,
	       *tp ? tp : "-", (double)n->store_capacity_bytes / (1 << 20));
}

/* A warning under the list for each live node that advertises loopback while live nodes on
 * other hosts do not: those hosts cannot pull from it (node_addr.c warns in its log too). */
static void print_clashes(const struct ferry_gcs_node_info *nodes, int count)
{
	struct ferry__node_addr a, b;
	char id[2 * sizeof(nodes[0].id) + 1];

	for (int i = 0; i < count; i++) {
		const char *ta = nodes[i].address ? nodes[i].address : "";
		bool clash = false;

		if (nodes[i].state == FERRY_GCS_NODE_DEAD ||
		    ferry__node_addr_parse(ta, strlen(ta), &a) < 0)
			continue;
		for (int j = 0; j < count && !clash; j++) {
			const char *tb = nodes[j].address ? nodes[j].address : "";

			clash = j != i && nodes[j].state != FERRY_GCS_NODE_DEAD &&
				ferry__node_addr_parse(tb, strlen(tb), &b) == 0 &&
				ferry__node_addr_clash(&a, &b) == 1;
		}
		if (!clash)
			continue;
		ferry_id_to_hex(&nodes[i].id, sizeof(nodes[i].id), id, sizeof(id));
		printf("warning: node %.12s advertises the loopback address %s while nodes on "
		       "other "
		       "hosts do not:\n  they cannot pull from it. Restart it with --ip "
		       "ADDRESS|INTERFACE\n",
		       id, a.ip);
	}
}

/* For a node this host started and still runs, the store socket a local program connects to,
 * into @out (else ""). */
static void local_socket(const struct ferry_gcs_node_info *n, char *out, size_t size)
{
	char id[2 * sizeof(n->id) + 1], path[PATH_MAX], rec[64];
	ssize_t len;

	*out = '\0';
	ferry_id_to_hex(&n->id, sizeof(n->id), id, sizeof(id));
	for (unsigned i = 1; i <= FERRY_CLI_MAX_NODES; i++) {
		snprintf(path, sizeof(path), "%s/node-%u/node.id", ferry__cli_run_dir, i);
		len = ferry__cli_read_file(path, rec, sizeof(rec) - 1);
		if (len <= 0)
			continue;
		rec[len] = '\0';
		rec[strcspn(rec, "\n")] = '\0';
		if (strcmp(rec, id))
			continue;
		snprintf(path, sizeof(path), "%s/node-%u/node.pid", ferry__cli_run_dir, i);
		if (!ferry__cli_pid_is(ferry__cli_read_pid(path), "ferry-node"))
			return;
		snprintf(out, size, "%s/node-%u/store.sock", ferry__cli_run_dir, i);
		return;
	}
}

/* The store and transfer line under a node's row, from the node itself. */
static void print_figures(const struct ferry__cli_figures *f)
{
	char used[32], cap[32], spilled[32], pulled[32], served[32];

	if (f->status < 0) {
		printf("  store: not read: %s\n", f->why);
		return;
	}
	ferry__cli_size_text(f->used, used, sizeof(used));
	ferry__cli_size_text(f->capacity, cap, sizeof(cap));
	ferry__cli_size_text(f->spilled_bytes, spilled, sizeof(spilled));
	ferry__cli_size_text(f->bytes_pulled, pulled, sizeof(pulled));
	ferry__cli_size_text(f->bytes_served, served, sizeof(served));
	printf("  store %s of %s used, %" PRIu64 " objects (%" PRIu64 " pinned, %" PRIu64
	       " primary), %" PRIu64 " spilled (%s)\n",
	       used, cap, f->objects, f->pinned, f->primary, f->spilled_objects, spilled);
	printf("  transfers: %" PRIu64 " pulls in flight, %" PRIu64 " done (%s), %" PRIu64
	       " failed; %" PRIu64 " served (%s)\n",
	       f->pulls_in_flight, f->pulls_ok, pulled, f->pulls_failed, f->requests_served,
	       served);
}

/* Per node a node's figures bound the wait: a node just gone must not cost the whole timeout. */
#define FIGURES_TIMEOUT_S 5u

static void json_u64(const char *name, uint64_t v, bool comma)
{
	printf("%s\"%s\": %" PRIu64, comma ? ", " : "", name, v);
}

static void print_status_json(const char *addr, const struct ferry_gcs_node_info *nodes, int n,
			      const struct ferry_gcs_node_load *loads, int nloads,
			      const struct ferry__cli_figures *figs)
{
	uint64_t used = 0, cap = 0, objects = 0, in_flight = 0;
	int alive = 0;

	printf("{\"gcs\": ");
	ferry__cli_json_str(addr);
	printf(", \"nodes\": [");
	for (int i = 0; i < n; i++) {
		const struct ferry_gcs_node_load *l =
			ferry__cli_find_load(loads, nloads, &nodes[i].id);
		const struct ferry__cli_figures *f = &figs[i];
		char id[2 * sizeof(nodes[i].id) + 1], sock[PATH_MAX];

		ferry_id_to_hex(&nodes[i].id, sizeof(nodes[i].id), id, sizeof(id));
		printf("%s\n  {\"id\": \"%s\", \"state\": \"%s\", \"address\": ", i ? "," : "", id,
		       state_name(nodes[i].state));
		ferry__cli_json_str(nodes[i].address);
		json_u64("store_capacity_bytes", nodes[i].store_capacity_bytes, true);
		local_socket(&nodes[i], sock, sizeof(sock));
		printf(", \"store_socket\": ");
		ferry__cli_json_str(*sock ? sock : NULL);
		if (l && nodes[i].state != FERRY_GCS_NODE_DEAD) {
			printf(", \"resources\": [");
			for (uint32_t r = 0; r < l->nresources; r++) {
				printf("%s{\"name\": ", r ? ", " : "");
				ferry__cli_json_str(l->resources[r].name);
				printf(", \"total\": %g, \"available\": %g}",
				       (double)l->resources[r].total / FERRY_GCS_RESOURCE_UNIT,
				       (double)l->resources[r].available / FERRY_GCS_RESOURCE_UNIT);
			}
			printf("], \"queue_length\": %u, \"mean_task_us\": %" PRIu64
			       ", \"workers\": {\"idle\": %u, \"leased\": %u, \"starting\": %u}",
			       l->queue_length, l->mean_task_us, l->workers_idle, l->workers_leased,
			       l->workers_starting);
		}
		if (nodes[i].state == FERRY_GCS_NODE_DEAD) {
			printf("}");
			continue;
		}
		alive += nodes[i].state == FERRY_GCS_NODE_ALIVE;
		if (f->status < 0) {
			printf(", \"error\": ");
			ferry__cli_json_str(f->why);
			printf("}");
			continue;
		}
		printf(", \"store\": {");
		json_u64("capacity_bytes", f->capacity, false);
		json_u64("used_bytes", f->used, true);
		json_u64("objects", f->objects, true);
		json_u64("pinned_objects", f->pinned, true);
		json_u64("primary_objects", f->primary, true);
		json_u64("spilled_objects", f->spilled_objects, true);
		json_u64("spilled_bytes", f->spilled_bytes, true);
		json_u64("evicted_objects", f->evicted_objects, true);
		json_u64("evicted_bytes", f->evicted_bytes, true);
		printf("}, \"transfers\": {");
		json_u64("pulls_in_flight", f->pulls_in_flight, false);
		json_u64("pulls_ok", f->pulls_ok, true);
		json_u64("pulls_failed", f->pulls_failed, true);
		json_u64("bytes_pulled", f->bytes_pulled, true);
		json_u64("requests_served", f->requests_served, true);
		json_u64("bytes_served", f->bytes_served, true);
		printf("}");
		json_u64("uptime_ms", f->uptime_ms, true);
		printf("}");
		used += f->used;
		cap += f->capacity;
		objects += f->objects;
		in_flight += f->pulls_in_flight;
	}
	printf("%s], \"totals\": {\"nodes\": %d, \"alive\": %d", n ? "\n" : "", n, alive);
	json_u64("store_used_bytes", used, true);
	json_u64("store_capacity_bytes", cap, true);
	json_u64("objects", objects, true);
	json_u64("pulls_in_flight", in_flight, true);
	printf("}}\n");
}

/* A client of the GCS status and list ask: --address and --token-file, else the run
 * directory's cluster. Its address into @addr. */
static int connect_asked(const struct opts *o, struct ferry_gcs_client **c, char *addr, size_t size)
{
	struct ferry__cli_cluster here;
	const char *token_path;
	struct ferry__cli_live live;
	int ret;

	ferry__cli_cluster_read(&here);
	ferry__cli_run_live(&live);
	snprintf(addr, size, "%s", o->address ? o->address : here.address);
	token_path = o->token_file ? o->token_file : here.token;
	if (!*addr || !*token_path) {
		ferry__cli_fail(
			"no cluster started from %s: give --address HOST:PORT --token-file F",
			ferry__cli_run_dir);
		return -EINVAL;
	}
	/* The GCS this host started, if that is the one asked: known dead without a connect. */
	ret = gcs_connect(addr, token_path, strcmp(addr, here.address) ? 0 : live.gcs, o->timeout_s,
			  c);
	if (ret < 0 && !strcmp(addr, here.address) && live.gcs && !live.gcs_alive)
		print_gcs_log(&here); /* why it is gone */
	return ret;
}

/* The token file the asked cluster's nodes take: --token-file, else the run directory's. */
static const char *token_asked(const struct opts *o, struct ferry__cli_cluster *here)
{
	ferry__cli_cluster_read(here);
	return o->token_file ? o->token_file : here->token;
}

/* list objects, memory, timeline: read from the nodes the GCS lists. */
static int cmd_inspect(const char *cmd, const struct opts *o)
{
	struct ferry_gcs_node_info *nodes = NULL;
	struct ferry_gcs_client *c = NULL;
	struct ferry__cli_cluster here;
	const char *token = token_asked(o, &here);
	char addr[256];
	int ret = connect_asked(o, &c, addr, sizeof(addr)), n;

	if (ret < 0)
		return ret;
	n = ferry_gcs_node_list(c, &nodes);
	if (n < 0) {
		ferry__cli_fail("listing nodes at %s failed: %s", addr, ferry_strerror(n));
		ret = n;
	} else if (!strcmp(cmd, "timeline")) {
		ret = ferry__cli_timeline(nodes, n, token, o->timeout_s, o->node, o->limit,
					  o->output);
	} else {
		ret = ferry__cli_objects(c, nodes, n, token, o->timeout_s, o->node, o->limit,
					 o->json, !strcmp(cmd, "memory"));
	}
	ferry_gcs_free(nodes);
	ferry_gcs_client_destroy(c);
	return ret;
}

static int cmd_list(const struct opts *o)
{
	struct ferry_gcs_client *c = NULL;
	char addr[256];
	int ret;

	if (!strcmp(o->what, "objects"))
		return cmd_inspect("list", o);
	ret = connect_asked(o, &c, addr, sizeof(addr));
	if (ret == 0)
		ret = ferry__cli_list(c, o->what, o->node, o->limit, o->json);
	ferry_gcs_client_destroy(c);
	return ret;
}

static int cmd_status(const struct opts *o)
{
	struct ferry_gcs_node_info *nodes = NULL;
	struct ferry_gcs_node_load *loads = NULL;
	struct ferry_gcs_client *c = NULL;
	struct ferry__cli_figures *figs = NULL;
	struct ferry__cli_cluster here;
	const char *token = token_asked(o, &here);
	char addr[256], sock[PATH_MAX];
	int ret, alive = 0, nloads;

	ret = connect_asked(o, &c, addr, sizeof(addr));
	if (ret < 0)
		return ret;
	ret = ferry_gcs_node_list(c, &nodes);
	/* Loads are an older GCS's unknown list: then the rows go without them. */
	nloads = ret < 0 ? 0 : ferry_gcs_node_load_list(c, &loads);
	ferry_gcs_client_destroy(c);
	if (ret < 0) {
		ferry__cli_fail("listing nodes at %s failed: %s", addr, ferry_strerror(ret));
		return ret;
	}
	nloads = nloads < 0 ? 0 : nloads;
	figs = calloc((size_t)ret + 1, sizeof(*figs));
	if (!figs) {
		ferry__cli_fail("out of memory");
		ferry_gcs_free(nodes);
		ferry_gcs_free(loads);
		return -ENOMEM;
	}
	for (int i = 0; i < ret; i++)
		if (nodes[i].state != FERRY_GCS_NODE_DEAD)
			ferry__cli_figures(nodes[i].address, token,
					   FERRY_MIN(o->timeout_s, FIGURES_TIMEOUT_S), &figs[i]);
	if (o->json) {
		print_status_json(addr, nodes, ret, loads, nloads, figs);
		free(figs);
		ferry_gcs_free(nodes);
		ferry_gcs_free(loads);
		return 0;
	}
	printf("GCS %s\n%-12s  %-8s  %-22s  %-18s  %12s\n", addr, "NODE", "STATE", "ADDRESS",
	       "TRANSPORTS", "STORE");
	for (int i = 0; i < ret; i++) {
		const struct ferry_gcs_node_load *l =
			ferry__cli_find_load(loads, nloads, &nodes[i].id);

		print_node(&nodes[i]);
		if (l && nodes[i].state != FERRY_GCS_NODE_DEAD)
			ferry__cli_print_load(l);
		if (nodes[i].state != FERRY_GCS_NODE_DEAD) {
			print_figures(&figs[i]);
			local_socket(&nodes[i], sock, sizeof(sock));
			if (*sock)
				printf("  store socket (this host): %s\n", sock);
		}
		alive += nodes[i].state == FERRY_GCS_NODE_ALIVE;
	}
	printf("%d node%s, %d alive\n", ret, ret == 1 ? "" : "s", alive);
	ferry__cli_print_load_totals(loads, nloads, nodes, ret);
	print_clashes(nodes, ret);
	free(figs);
	ferry_gcs_free(nodes);
	ferry_gcs_free(loads);
	return 0;
}

/* ---- command line ---- */

/* --num-cpus, --num-gpus, --resources: checked here, in the CLI's words, then passed through. */
static int parse_resource_flag(int c, const char *v, struct opts *o)
{
	static struct ferry__res_set set; /* large: not on the stack */
	int64_t amount;

	memset(&set, 0, sizeof(set));
	if (c == 'R') {
		if (ferry__res_parse_custom(v, &set) < 0) {
			ferry__cli_fail("bad --resources value: %s (NAME=AMOUNT,...: names of "
					"A-Z a-z 0-9 _ . : -, each once, at most 64, not CPU, GPU "
					"or memory; amounts >= 0)",
					v);
			return -EINVAL;
		}
		o->resources = v;
		return 0;
	}
	if (ferry__res_parse_amount(v, c == 'C' ? "--num-cpus" : "--num-gpus", &amount) < 0) {
		ferry__cli_fail("bad --num-%s value: %s (a number >= 0, at most 4 decimals)",
				c == 'C' ? "cpus" : "gpus", v);
		return -EINVAL;
	}
	*(c == 'C' ? &o->num_cpus : &o->num_gpus) = v;
	return 0;
}

/* --address: HOST:PORT with a host and a port 1-65535 (a bad port is a bad flag, exit 2, as a
 * missing colon is; it used to pass here and fail later with exit 1). */
static bool address_ok(const char *a)
{
	const char *colon = strrchr(a, ':');
	unsigned long port;
	char *end;

	if (!colon || colon == a || !isdigit((unsigned char)colon[1]))
		return false;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	return !*end && !errno && port >= 1 && port <= 65535;
}

/* 0, 1 for --help, 2 for --version, or -EINVAL (said why). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{"head", no_argument, NULL, 'H'},
		{"slurm", no_argument, NULL, 'L'},
		{"block", no_argument, NULL, 'B'},
		{"sched", no_argument, NULL, 'S'},
		{"sched-group", required_argument, NULL, 'g'},
		{"group", required_argument, NULL, 'r'},
		{"port", required_argument, NULL, 'p'},
		{"address", required_argument, NULL, 'a'},
		{"token-file", required_argument, NULL, 't'},
		{"memory", required_argument, NULL, 'm'},
		{"transport", required_argument, NULL, 'T'},
		{"shm", required_argument, NULL, 'X'},
		{"ip", required_argument, NULL, 'i'},
		{"spin-us", required_argument, NULL, 's'},
		{"num-cpus", required_argument, NULL, 'C'},
		{"num-gpus", required_argument, NULL, 'G'},
		{"resources", required_argument, NULL, 'R'},
		{"num-workers", required_argument, NULL, 'n'},
		{"max-workers", required_argument, NULL, 'M'},
		{"worker-idle-ms", required_argument, NULL, 'I'},
		{"timeout", required_argument, NULL, 'w'},
		{"json", no_argument, NULL, 'J'},
		{"node", required_argument, NULL, 'N'},
		{"limit", required_argument, NULL, 'Z'},
		{"output", required_argument, NULL, 'o'},
		{"metrics-port-base", required_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	uint64_t size;
	uint32_t v;
	int c;

	o->port = DEFAULT_PORT;
	o->timeout_s = DEFAULT_TIMEOUT_S;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			return 1;
		case 'V':
			return 2;
		case 'H':
			o->head = true;
			break;
		case 'L':
			o->slurm = true;
			break;
		case 'J':
			o->json = true;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'P':
			if (ferry__parse_u32(optarg, 65535 - 10 - FERRY_CLI_MAX_NODES, &v) < 0 ||
			    v == 0) {
				ferry__cli_fail("bad --metrics-port-base value: %s (1..%u)", optarg,
						65535 - 10 - FERRY_CLI_MAX_NODES);
				return -EINVAL;
			}
			ferry__cli_metrics_base = (uint16_t)v;
			break;
		case 'N':
			if (!*optarg || strspn(optarg, "0123456789abcdef") != strlen(optarg) ||
			    strlen(optarg) > 32) {
				ferry__cli_fail("--node wants a node ID or its first hex digits, "
						"not %s",
						optarg);
				return -EINVAL;
			}
			o->node = optarg;
			break;
		case 'Z':
			if (ferry__parse_u32(optarg, UINT32_MAX - 1, &v) < 0 || v == 0) {
				ferry__cli_fail("bad --limit value: %s (1..%u)", optarg,
						UINT32_MAX - 1);
				return -EINVAL;
			}
			o->limit = v;
			break;
		case 'B':
			o->block = true;
			break;
		case 'S':
			o->sched = true;
			break;
		case 'g': /* the names are checked by ferry-sched and ferry-node */
			o->sched_group = optarg;
			break;
		case 'r':
			o->group = optarg;
			break;
		case 'p':
		case 'w':
			if (ferry__parse_u32(optarg, c == 'p' ? 65535 : 3600, &v) < 0 ||
			    (c == 'w' && v == 0)) {
				ferry__cli_fail("bad --%s value: %s", c == 'p' ? "port" : "timeout",
						optarg);
				return -EINVAL;
			}
			if (c == 'p') {
				o->port = (uint16_t)v;
				o->port_set = true;
			} else
				o->timeout_s = (unsigned)v;
			break;
		case 'a':
			if (!address_ok(optarg)) {
				ferry__cli_fail(
					"--address wants HOST:PORT (a port 1-65535), got %s",
					optarg);
				return -EINVAL;
			}
			o->address = optarg;
			break;
		case 't':
			o->token_file = optarg;
			break;
		case 'm':
			if (ferry_parse_size(optarg, &size) < 0 || size == 0) {
				ferry__cli_fail("bad --memory size: %s (e.g. 512M, 4G)", optarg);
				return -EINVAL;
			}
			o->memory = optarg;
			break;
		case 'T':
			if (strcmp(optarg, "rdma") && strcmp(optarg, "tcp") &&
			    strcmp(optarg, "auto")) {
				ferry__cli_fail("--transport is rdma, tcp or auto, not %s", optarg);
				return -EINVAL;
			}
			o->transport = optarg;
			break;
		case 'X':
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				ferry__cli_fail("--shm is on or off, not %s", optarg);
				return -EINVAL;
			}
			o->shm = optarg;
			break;
		case 'i':
			o->ip = optarg;
			break;
		case 's':
			if (ferry__parse_u32(optarg, FERRY_LOOP_MAX_SPIN_US, &v) < 0) {
				ferry__cli_fail("bad --spin-us value: %s (0..1000000)", optarg);
				return -EINVAL;
			}
			o->spin_us = optarg;
			break;
		case 'C':
		case 'G':
		case 'R':
			if (parse_resource_flag(c, optarg, o) < 0)
				return -EINVAL;
			break;
		case 'n': /* the node's worker pool, passed through */
		case 'M':
		case 'I': {
			const char *flag = c == 'n'   ? "num-workers"
					   : c == 'M' ? "max-workers"
						      : "worker-idle-ms";
			uint32_t max = c == 'I' ? UINT32_MAX - 1 : FERRY__NODE_MAX_WORKERS;

			if (ferry__parse_u32(optarg, max, &v) < 0) {
				ferry__cli_fail("bad --%s value: %s (0..%u)", flag, optarg, max);
				return -EINVAL;
			}
			if (c == 'n')
				o->num_workers = optarg;
			else if (c == 'M')
				o->max_workers = optarg;
			else
				o->worker_idle_ms = optarg;
			break;
		}
		default:
			return -EINVAL;
		}
	}
	if (optind < argc && o->listing)
		o->what = argv[optind++];
	if (optind < argc) {
		ferry__cli_fail("unexpected argument: %s", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* The command's exit code: 2 for a usage error, 1 for a failure, 0. */
static int run(const char *cmd, const struct opts *o)
{
	int ret;

	if (o->head && o->address) {
		ferry__cli_fail("start takes --head or --address HOST:PORT, not both");
		return 2;
	}
	if (o->slurm && (o->head || o->address || o->block || o->token_file)) {
		ferry__cli_fail("start --slurm makes its own head and token: not with --head, "
				"--address, --token-file or --block");
		return 2;
	}
	if (o->block && !o->address) {
		ferry__cli_fail("--block is for start --address (a node that stays in the "
				"foreground, as under srun)");
		return 2;
	}
	if (!strcmp(cmd, "start") && !o->head && !o->address && !o->slurm) {
		ferry__cli_fail(
			"start needs --head (a new cluster) or --address HOST:PORT (join one)");
		return 2;
	}
	bool inspect = !strcmp(cmd, "list") || !strcmp(cmd, "memory") || !strcmp(cmd, "timeline");

	if (!strcmp(cmd, "list") != !!o->what || (!inspect && (o->node || o->limit))) {
		ferry__cli_fail("list takes one of: nodes, objects, tasks, workers, actors, "
				"placement-groups, jobs (and --node ID, --limit N, --json)");
		return 2;
	}
	if ((o->json &&
	     (!strcmp(cmd, "timeline") || !strcmp(cmd, "stop") || !strcmp(cmd, "start"))) ||
	    (o->output && strcmp(cmd, "timeline"))) {
		ferry__cli_fail("%s is not an option of %s", o->json ? "--json" : "--output", cmd);
		return 2;
	}
	if (o->what) {
		const char *const *k = ferry__cli_list_kinds;

		while (*k && strcmp(*k, o->what))
			k++;
		if (!*k) {
			ferry__cli_fail("cannot list %s: nodes, objects, tasks, workers, actors, "
					"placement-groups or jobs",
					o->what);
			return 2;
		}
	}
	if ((strcmp(cmd, "start") &&
	     (o->head || o->slurm || o->block || o->sched || o->memory || o->transport || o->ip ||
	      ferry__cli_metrics_base || o->shm || o->spin_us || o->num_cpus || o->num_gpus ||
	      o->resources || o->num_workers || o->max_workers || o->worker_idle_ms ||
	      o->sched_group || o->group)) ||
	    (!strcmp(cmd, "stop") && (o->address || o->token_file))) {
		ferry__cli_fail("option not valid for %s", cmd);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (o->block) { /* from now on: a SIGTERM during the start must not leave its node */
		sigset_t set;

		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGHUP);
		sigprocmask(SIG_BLOCK, &set, NULL);
	}
	if (ferry__cli_run_dir_init(!strcmp(cmd, "start")) < 0)
		return 1;
	if (!strcmp(cmd, "start"))
		ret = cmd_start(o);
	else if (!strcmp(cmd, "status"))
		ret = cmd_status(o);
	else if (!strcmp(cmd, "list"))
		ret = cmd_list(o);
	else if (!strcmp(cmd, "memory") || !strcmp(cmd, "timeline"))
		ret = cmd_inspect(cmd, o);
	else
		ret = cmd_stop(o);
	fflush(stdout);
	return ret < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o = {0};
	const char *cmd = argc > 1 ? argv[1] : "";
	int ret;

	if (ferry__is_help_flag(cmd) || !strcmp(cmd, "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (ferry__is_version_flag(cmd)) {
		ferry__version_print("ferry");
		return 0;
	}
	if (strcmp(cmd, "start") && strcmp(cmd, "status") && strcmp(cmd, "stop") &&
	    strcmp(cmd, "list") && strcmp(cmd, "memory") && strcmp(cmd, "timeline")) {
		if (*cmd)
			ferry__cli_fail("unknown command: %s", cmd);
		fputs(usage_text, stderr);
		return 2;
	}
	/* Warnings of the libraries (a refused handshake, say) repeat what the command says in its
	 * own words; FERRY_LOG shows them. */
	if (!getenv("FERRY_LOG"))
		(void)ferry_log_configure("error");
	/* getopt names argv[0] in its messages: "ferry: unrecognized option ..." */
	static char program[] = "ferry";
	char *const command = argv[1];

	argv[1] = program;
	o.listing = !strcmp(cmd, "list");
	ret = parse_opts(argc - 1, argv + 1, &o);
	argv[1] = command;
	if (ret > 0) { /* --help or --version after the command */
		if (ret == 1)
			fputs(usage_text, stdout);
		else
			ferry__version_print("ferry");
		return 0;
	}
	if (ret == 0)
		ret = run(cmd, &o);
	else
		ret = 2;
	if (ret == 2)
		fputs(usage_text, stderr);
	return ret;
}
