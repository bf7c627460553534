/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The parts of the `ferry` command (tools/ferry.c) that know the run directory
 * (tools/ferry_run.c), start and stop daemons (tools/ferry_daemon.c) and check that a GCS
 * answers before anything is started against it (tools/ferry_probe.c).
 *
 * Thread model: one thread (a command-line program).
 */
#ifndef FERRY_TOOLS_FERRY_CLI_H
#define FERRY_TOOLS_FERRY_CLI_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FERRY_CLI_MAX_NODES 64 /* node-N slots per run directory */
#define FERRY_CLI_MAX_SCHEDS 8 /* sched-N slots per run directory */

/* start --metrics-port-base: the GCS's metrics port, the others after it; 0: none. */
extern uint16_t ferry__cli_metrics_base;

/* $FERRY_RUN_DIR or /tmp/ferry-$UID, set by ferry__cli_run_dir_init(). */
extern char ferry__cli_run_dir[PATH_MAX - 256];

/* "ferry: " + the message + newline on stderr. */
__attribute__((format(printf, 1, 2))) void ferry__cli_fail(const char *fmt, ...);

/* ---- run directory (ferry_run.c) ---- */

/* Find the run directory; @create: make it (start) rather than accept its absence. */
int ferry__cli_run_dir_init(bool create);

/* Take the run directory's lock (start and stop hold it, so two of them never interleave their
 * checks and writes). Returns the fd to close, or -errno (said why). */
int ferry__cli_run_lock(void);

ssize_t ferry__cli_read_file(const char *path, char *buf, size_t size);
/* @text into @path through a temporary file and rename: readers see the old or the new file. */
int ferry__cli_write_file(const char *path, const char *text, mode_t mode);
pid_t ferry__cli_read_pid(const char *path);
/* Is @pid alive (not a zombie) and still running the program @name? */
bool ferry__cli_pid_is(pid_t pid, const char *name);

/* What the run directory says about the cluster. Every field is "" when unknown. */
struct ferry__cli_cluster {
	char address[256];    /* GCS HOST:PORT */
	char token[PATH_MAX]; /* token file */
	char session[128];    /* session directory name (logs) */
};
int ferry__cli_cluster_read(struct ferry__cli_cluster *c);
int ferry__cli_cluster_write(const struct ferry__cli_cluster *c);

/* A start's replacement of the run directory's `token` by a new one, until the start ends. A
 * zeroed one has replaced nothing: its undo and done do nothing. */
struct ferry__cli_token_swap {
	bool swapped;	     /* `token` is the new one: undo puts @kept back, done drops it */
	char kept[PATH_MAX]; /* the `token` replaced, kept as token.old-PID ("": none was there) */
};
/* A new random token becomes the run directory's `token` (written beside it and renamed: never
 * seen half written); its path into @final. The `token` that was there is kept (a hard link)
 * until ferry__cli_token_swap_undo() or _done(). On an error (said) nothing changed. */
int ferry__cli_token_swap(struct ferry__cli_token_swap *swap, char *final, size_t size);
/* The start failed: `token` goes back to what it was (removed if there was none). */
void ferry__cli_token_swap_undo(struct ferry__cli_token_swap *swap);
/* The start succeeded: the replaced token is dropped. */
void ferry__cli_token_swap_done(struct ferry__cli_token_swap *swap);

/* A new session_DATE_TIME_PID/logs directory, `session_latest` pointing at it. */
int ferry__cli_session_create(char *name, size_t size);
/* The logs directory of session @name. */
void ferry__cli_session_logs(const char *name, char *dir, size_t size);

/* Processes this run directory started that still run. */
struct ferry__cli_live {
	pid_t gcs;	      /* recorded GCS pid (0: none recorded) */
	bool gcs_alive;	      /* ...and it still runs */
	unsigned nodes_alive; /* node-N whose ferry-node runs */
	unsigned first_node;  /* N of the first of them */
	pid_t first_node_pid; /* its pid */
};
void ferry__cli_run_live(struct ferry__cli_live *live);
/* Remove node-N directories whose node no longer runs (the lock is held: no start is
 * between claiming one and writing its pid). */
void ferry__cli_reap_stale_nodes(void);
void ferry__cli_remove_node_dir(const char *dir);
/* Remove the token.old-PID and token.new-PID files (ferry__cli_token_swap()) of starts that were
 * killed before they ended: those whose PID no longer runs, each said on stdout. */
void ferry__cli_reap_kept_tokens(void);

/* ---- daemons (ferry_daemon.c) ---- */

struct ferry__cli_daemon {
	const char *name;	 /* "ferry-gcs", "ferry-node": the program it must still be */
	char pid_path[PATH_MAX]; /* where its pid is recorded */
	char out_path[PATH_MAX]; /* its stdout: the ready line */
	char log_path[PATH_MAX]; /* its stderr */
	uint64_t store_bytes;	 /* a node's store size: shown while it pre-faults (0: none) */
	pid_t pid;		 /* once started */
};

/* @pid_dir/@stem.pid, @log_dir/@log_stem.out and .log. */
void ferry__cli_daemon_paths(struct ferry__cli_daemon *d, const char *name, const char *pid_dir,
			     const char *stem, const char *log_dir, const char *log_stem);
int ferry__cli_daemon_spawn(struct ferry__cli_daemon *d, const char *const argv[]);
/* Wait for a line with @marker on its stdout (into @line); on failure say why, with the end of
 * its log. */
int ferry__cli_daemon_wait_ready(const struct ferry__cli_daemon *d, const char *marker,
				 unsigned timeout_s, char *line, size_t size);
/* SIGTERM, wait up to @timeout_s, SIGKILL. Returns 1 if it had to kill, 0, or -ESRCH. */
int ferry__cli_daemon_stop(pid_t pid, const char *name, unsigned timeout_s);
int ferry__cli_find_program(const char *name, const char *env, char *out, size_t size);
void ferry__cli_print_log_tail(const char *path);

/* ---- is a GCS there (ferry_probe.c) ---- */

/*
 * ferry__cli_probe_gcs() - can a TCP connection to the GCS at @address (HOST:PORT) be made?
 * Fails at once, with one line saying why, on a name that does not resolve, a refused
 * connection, or (@local_gcs_pid > 0) the GCS this host started no longer running (while it
 * runs, no connection is made: it is known there). Returns 0,
 * -EINVAL, -EHOSTUNREACH (no such host), -ECONNREFUSED, -ETIMEDOUT or another -errno.
 */
int ferry__cli_probe_gcs(const char *address, pid_t local_gcs_pid, unsigned timeout_s);

/* ---- status: resources (ferry_load.c) ---- */

struct ferry_gcs_node_load;
struct ferry_node_id;
/* The report of node @id in @loads, or NULL. */
const struct ferry_gcs_node_load *ferry__cli_find_load(const struct ferry_gcs_node_load *loads,
						       int count, const struct ferry_node_id *id);
/* "  resources (available/total): CPU 2/2, ...; queue 0" under a node's row. */
void ferry__cli_print_load(const struct ferry_gcs_node_load *l);
struct ferry_gcs_node_info;
/* "cluster (available/total): ..." summed over @loads of the live nodes among @nodes, host
 * memory counted once per host (nodes on one host each report all of it); nothing when empty.
 * Says how many live nodes have not reported yet (one just joined). */
void ferry__cli_print_load_totals(const struct ferry_gcs_node_load *loads, int count,
				  const struct ferry_gcs_node_info *nodes, int nnodes);

/* The address other hosts should use to reach a daemon of this host listening on @head (an
 * address, or "0.0.0.0": every one): @head itself, else the first non-loopback IPv4, else
 * loopback. In ferry.c. */
void ferry__cli_advertised_ip(const char *head, char *buf, size_t size);

/* ---- global schedulers (ferry_sched_cli.c) ---- */

/* Start one more ferry-sched from this run directory, listening on @ip (NULL: every address),
 * the scheduler of group @group (NULL: a global one), logging into @logs. 0 or -errno (said
 * why). */
int ferry__cli_sched_start(const char *gcs_address, const char *token_path, const char *ip,
			   const char *group, const char *logs, unsigned timeout_s);
/* Stop every ferry-sched started from here (each counted in *@stopped). 0 or -EBUSY. */
int ferry__cli_sched_stop_all(unsigned timeout_s, int *stopped);

/* ---- Slurm (ferry_slurm.c) ---- */

#define FERRY_CLI_HOST_MAX 256	 /* a host name's bytes, with its NUL */
#define FERRY_CLI_MAX_HOSTS 4096 /* hosts of one job that --slurm starts nodes on */

/* The hosts of this Slurm job in order ($SLURM_JOB_NODELIST through `scontrol show hostnames`)
 * into @hosts; their count, or -errno (said why: not in a job, no scontrol, too many). */
int ferry__cli_slurm_hosts(char (*hosts)[FERRY_CLI_HOST_MAX], unsigned max);
/* sbcast: @src to the path @dst on every host of the job. 0 or -errno (said why). */
int ferry__cli_slurm_bcast(const char *src, const char *dst);
/* One srun step (recorded as the run directory's slurm-step.pid, logged into @logs) that runs
 * the ferry command @ferry_args (argv, NULL-terminated) once on each of @hosts. 0 and *@out its
 * pid, or -errno (said why). */
int ferry__cli_slurm_launch(char (*hosts)[FERRY_CLI_HOST_MAX], unsigned n,
			    const char *const *ferry_args, const char *logs, pid_t *out);

/* ---- list (ferry_list.c) ---- */

struct ferry_gcs_client;
/* The kinds `ferry list` knows, NULL-terminated. */
extern const char *const ferry__cli_list_kinds[];
/* Print the GCS's table @what (one of ferry__cli_list_kinds) as rows or a JSON array: the rows
 * of nodes whose ID starts with @node (NULL: all), at most @limit (0: all). 0 or -errno (said
 * why). */
int ferry__cli_list(struct ferry_gcs_client *c, const char *what, const char *node, unsigned limit,
		    bool json);

#endif
