/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-bench's command line as a new user meets it: --help lists its own flags (and Google
 * Benchmark's) on stdout with exit 0, --version names the commit, and an unknown flag is
 * refused with exit 2 before anything runs, in every mode. Program: FERRY_BENCH_BIN.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

/* Run `ferry-bench ARGS`: exit code, stdout into @out, stderr into @err. */
__attribute__((format(printf, 5, 6))) static int bench(char *out, size_t out_size, char *err,
						       size_t err_size, const char *fmt, ...)
{
	const char *bin = getenv("FERRY_BENCH_BIN");
	char args[1024], cmd[2048], err_path[512];
	size_t n;
	va_list ap;
	FILE *p;
	int code;

	if (!bin || access(bin, X_OK) < 0)
		ftest_skip("ferry-bench is not built (FERRY_BENCH_BIN)");
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(err_path, sizeof(err_path), "%s/stderr", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>'%s'", bin, args, err_path);
	code = itest_popen_read(cmd, out, out_size);
	p = fopen(err_path, "r");
	n = p ? fread(err, 1, err_size - 1, p) : 0;
	err[n] = '\0';
	if (p)
		fclose(p);
	ftest_log("$ ferry-bench %s -> %d\n%.2000s%s", args, code, out, err);
	return code;
}

FTEST(help_lists_own_flags)
{
	static const char *const flags[] = {
		"--spin-us",	"--client",    "--server", "--ip",
		"--token-file", "--transport", "--1gib",   "--benchmark_filter",
		"-d DEV",	"-x GID",      "-s SIZE",  "-a "};
	char out[32768], err[4096];

	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err), "--help"), 0);
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (!strstr(out, flags[i]))
			ftest__fail(__FILE__, __LINE__, "--help does not list %s", flags[i]);
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err), "transport --help"), 0);
	ftest_assert_ptr_notnull(strstr(out, "--spin-us"));
}

FTEST(version_names_the_commit)
{
	char out[4096], err[4096];

	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err), "--version"), 0);
	ftest_assert_ptr_notnull(strstr(out, "commit "));
}

FTEST(unknown_flags_refused)
{
	char out[8192], err[8192];

	/* The filter matches nothing: a binary that ignored the flag would exit 0 at once. */
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err),
				  "--no-such-flag --benchmark_filter=NOTHING"),
			    2);
	ftest_assert_ptr_notnull(strstr(err, "--no-such-flag"));
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err),
				  "transport --no-such-flag --benchmark_filter=NOTHING"),
			    2);
	ftest_assert_ptr_notnull(strstr(err, "--no-such-flag"));
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err),
				  "transport --client 127.0.0.1:1 --token-file /dev/null "
				  "--spin-uss 5 --benchmark_filter=NOTHING"),
			    2);
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err),
				  "transport --spin-us 99999999 --server --token-file /dev/null"),
			    2);
	/* --spin-us belongs to the two-host mode. */
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err),
				  "transport --spin-us 10 --benchmark_filter=NOTHING"),
			    2);
}

/* perftest's flags: for the two-host mode only, -i/-x with -d, sizes that are sizes. */
FTEST(perftest_flags_refused_when_wrong)
{
	static const struct {
		const char *args;
		const char *says;
	} cases[] = {
		{"transport -s 8 --benchmark_filter=NOTHING", "are for --server/--client"},
		{"transport -a --benchmark_filter=NOTHING", "are for --server/--client"},
		{"transport --server --token-file /dev/null -x 1", "-i and -x go with -d"},
		{"transport --server --token-file /dev/null -d rxe0 --ip 10.0.0.1", "-d or --ip"},
		{"transport --server --token-file /dev/null -s 0", "bad value for -s"},
		{"transport --server --token-file /dev/null -s 8,x", "bad value for -s"},
		{"transport --server --token-file /dev/null -s 2147483648", "bad value for -s"},
		{"transport --server --token-file /dev/null -i 0 -d rxe0", "bad value for -i"},
		{"transport --server --token-file /dev/null -d", "-d needs a value"},
	};
	char out[8192], err[8192];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err), "%s", cases[i].args),
				    2);
		if (!strstr(err, cases[i].says))
			ftest__fail(__FILE__, __LINE__, "'%s' does not say '%s'", cases[i].args,
				    cases[i].says);
	}
	/* A device this machine does not have: named, before anything starts. */
	ftest_assert_int_eq(bench(out, sizeof(out), err, sizeof(err),
				  "transport --server --token-file /dev/null -d nosuch_dev0"),
			    2);
	ftest_assert_ptr_notnull(strstr(err, "nosuch_dev0"));
}
