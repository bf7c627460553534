/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-node's command line (node/node_opts.c): every flag lands in its option, values are
 * range-checked, and a malformed line is -EINVAL (never a half-filled start).
 */
#include <stdint.h>
#include <string.h>

#include "node/node_opts.h"
#include "tests/harness/ftest.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Parse @argv (argv[0] included) into fresh options. */
static int parse(int argc, const char *const *argv, struct ferry__node_opts *o,
		 const char **token_file)
{
	memset(o, 0, sizeof(*o));
	*token_file = NULL;
	return ferry__node_parse_args(argc, argv, o, token_file);
}

FTEST(every_flag_lands_in_its_option)
{
	const char *argv[] = {"ferry-node",
			      "--gcs",
			      "10.0.0.1:4000",
			      "--token-file",
			      "/t",
			      "--memory",
			      "64M",
			      "--transport",
			      "rdma",
			      "--ip",
			      "eth0",
			      "--port",
			      "4001",
			      "--socket",
			      "/s.sock",
			      "--spill-dir",
			      "/spill",
			      "--node-id-file",
			      "/id",
			      "--rdma-port",
			      "4002",
			      "--rdma-busy-poll",
			      "on",
			      "--spin-us",
			      "50",
			      "--objmgr-loop",
			      "node",
			      "--copy-batch-us",
			      "2000",
			      "--notice-hold-ms",
			      "7",
			      "--max-queued",
			      "1M",
			      "--stall-timeout-ms",
			      "900",
			      "--shm",
			      "off"};
	struct ferry__node_opts o;
	const char *token;

	ftest_assert_ok(parse(ARGC(argv), argv, &o, &token));
	ftest_assert_str_eq(o.gcs_address, "10.0.0.1:4000");
	ftest_assert_str_eq(token, "/t");
	ftest_assert_uint_eq(o.memory_bytes, 64u << 20);
	ftest_assert_int_eq(o.transport, FERRY__NODE_TRANSPORT_RDMA);
	ftest_assert_str_eq(o.ip, "eth0");
	ftest_assert_uint_eq(o.port, 4001);
	ftest_assert_str_eq(o.socket_path, "/s.sock");
	ftest_assert_str_eq(o.spill_dir, "/spill");
	ftest_assert_str_eq(o.node_id_file, "/id");
	ftest_assert_uint_eq(o.rdma_port, 4002);
	ftest_assert_int_eq(o.rdma_busy_poll, 1);
	ftest_assert_uint_eq(o.spin_us, 50);
	ftest_assert_int_eq(o.objmgr_loop, FERRY__NODE_OBJMGR_LOOP_NODE);
	ftest_assert_uint_eq(o.copy_batch_us, 2000);
	ftest_assert_uint_eq(o.notice_hold_ms, 7);
	ftest_assert_uint_eq(o.max_queued_bytes, 1u << 20);
	ftest_assert_uint_eq(o.stall_timeout_ms, 900);
	ftest_assert_uint_eq(o.no_shm, 1);
}

FTEST(defaults_are_zero_and_later_flags_win)
{
	const char *argv[] = {"ferry-node", "--token-file",	"/t",  "--gcs",
			      "a:1",	    "--transport",	"tcp", "--transport",
			      "auto",	    "--rdma-busy-poll", "on",  "--rdma-busy-poll",
			      "off"};
	struct ferry__node_opts o;
	const char *token;

	ftest_assert_ok(parse(ARGC(argv), argv, &o, &token));
	ftest_assert_int_eq(o.transport, FERRY__NODE_TRANSPORT_AUTO);
	ftest_assert_int_eq(o.rdma_busy_poll, 0);
	ftest_assert_int_eq(o.objmgr_loop, FERRY__NODE_OBJMGR_LOOP_AUTO);
	ftest_assert_uint_eq(o.port, 0);
	ftest_assert_uint_eq(o.memory_bytes, 0);
	ftest_assert_ptr_null(o.ip);
	ftest_assert_ptr_null(o.socket_path);
}

/* One bad pair appended to a good line: the whole line is refused. */
static void refused(const char *flag, const char *value)
{
	const char *argv[] = {"ferry-node", "--gcs", "a:1", "--token-file", "/t", flag, value};
	struct ferry__node_opts o;
	const char *token;

	ftest_log("%s %s", flag, value ? value : "(missing)");
	ftest_assert_errno(parse(value ? ARGC(argv) : ARGC(argv) - 1, argv, &o, &token), -EINVAL);
}

FTEST(bad_values_are_refused)
{
	refused("--port", "65536");
	refused("--port", "-1");
	refused("--port", "80x");
	refused("--port", "");
	refused("--rdma-port", "70000");
	refused("--transport", "udp");
	refused("--transport", "TCP");
	refused("--rdma-busy-poll", "yes");
	refused("--shm", "no");
	refused("--objmgr-loop", "shared");
	refused("--objmgr-loop", "");
	refused("--memory", "30%");
	refused("--memory", "lots");
	refused("--spin-us", "1000001"); /* FERRY_LOOP_MAX_SPIN_US */
	refused("--copy-batch-us", "1000001");
	refused("--notice-hold-ms", "10001");
	refused("--max-queued", "0");
	refused("--max-queued", "4G");
	refused("--stall-timeout-ms", "4294967295");
	refused("--stall-timeout-ms", "-5");
	refused("--no-such-flag", "1");
	refused("gcs", "a:1");
	refused("--gcs", NULL); /* a flag without its value */
}

FTEST(limits_themselves_are_accepted)
{
	const char *argv[] = {"ferry-node", "--gcs",	       "a:1",	     "--token-file",
			      "/t",	    "--port",	       "65535",	     "--spin-us",
			      "1000000",    "--max-queued",    "4294967294", "--stall-timeout-ms",
			      "4294967294", "--copy-batch-us", "1000000"};
	struct ferry__node_opts o;
	const char *token;

	ftest_assert_ok(parse(ARGC(argv), argv, &o, &token));
	ftest_assert_uint_eq(o.port, 65535);
	ftest_assert_uint_eq(o.spin_us, 1000000);
	ftest_assert_uint_eq(o.max_queued_bytes, UINT32_MAX - 1);
	ftest_assert_uint_eq(o.stall_timeout_ms, UINT32_MAX - 1);
}

FTEST(gcs_and_token_file_are_required_and_not_empty)
{
	const char *no_token[] = {"ferry-node", "--gcs", "a:1"};
	const char *no_gcs[] = {"ferry-node", "--token-file", "/t"};
	const char *empty_gcs[] = {"ferry-node", "--gcs", "", "--token-file", "/t"};
	const char *empty_token[] = {"ferry-node", "--gcs", "a:1", "--token-file", ""};
	const char *nothing[] = {"ferry-node"};
	struct ferry__node_opts o;
	const char *token;

	ftest_assert_errno(parse(ARGC(no_token), no_token, &o, &token), -EINVAL);
	ftest_assert_errno(parse(ARGC(no_gcs), no_gcs, &o, &token), -EINVAL);
	ftest_assert_errno(parse(ARGC(empty_gcs), empty_gcs, &o, &token), -EINVAL);
	ftest_assert_errno(parse(ARGC(empty_token), empty_token, &o, &token), -EINVAL);
	ftest_assert_errno(parse(ARGC(nothing), nothing, &o, &token), -EINVAL);
}

FTEST(worker_pool_flags)
{
	const char *argv[] = {"ferry-node",
			      "--gcs",
			      "a:1",
			      "--token-file",
			      "/t",
			      "--num-workers",
			      "3",
			      "--max-workers",
			      "8",
			      "--worker-idle-ms",
			      "250",
			      "--worker-exe",
			      "/opt/ferry-worker"};
	const char *zero[] = {"ferry-node", "--gcs",	     "a:1", "--token-file",
			      "/t",	    "--num-workers", "0"};
	struct ferry__node_opts o;
	const char *token;

	ftest_assert_ok(parse(ARGC(argv), argv, &o, &token));
	ftest_assert_int_eq(o.num_workers, 3);
	ftest_assert_uint_eq(o.max_workers, 8);
	ftest_assert_uint_eq(o.worker_idle_ms, 250);
	ftest_assert_str_eq(o.worker_exe, "/opt/ferry-worker");
	/* 0 is "on demand only", which is not the options' 0 (the CPUs). */
	ftest_assert_ok(parse(ARGC(zero), zero, &o, &token));
	ftest_assert_int_eq(o.num_workers, -1);
	refused("--num-workers", "4097");
	refused("--num-workers", "-1");
	refused("--max-workers", "x");
	refused("--worker-idle-ms", "-5");
	refused("--worker-exe", "");
}

FTEST(scheduler_group)
{
	const char *argv[] = {"ferry-node", "--gcs",   "a:1",	    "--token-file",
			      "/t",	    "--group", "rack-1.b_2"};
	struct ferry__node_opts o;
	const char *token;

	ftest_assert_ok(parse(ARGC(argv), argv, &o, &token));
	ftest_assert_str_eq(o.sched_group, "rack-1.b_2");
	/* The name is part of KV namespaces: no separators, not empty, at most 63 bytes. */
	refused("--group", "");
	refused("--group", "a:b");
	refused("--group", "a b");
	refused("--group", "0123456789012345678901234567890123456789012345678901234567890123");
}
