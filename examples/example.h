/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the runtime examples share: where the job's code is. A driver names the shared library
 * its workers load (ferry_init_opts.code_path); these examples take it from the command line,
 * else from $FERRY_CODE (ferry_init reads it), else the library built beside the program.
 */
#ifndef FERRY_EXAMPLE_H
#define FERRY_EXAMPLE_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The job's library: @argv[1], else NULL ($FERRY_CODE), else @lib ("libX_lib.so") in the
 * directory of this program, written into @buf. */
static inline const char *example_code_path(int argc, char **argv, const char *lib, char *buf,
					    size_t size)
{
	ssize_t n = readlink("/proc/self/exe", buf, size - 1);
	size_t len = strlen(lib);
	char *slash;

	if (argc > 1)
		return argv[1];
	if (getenv("FERRY_CODE") || n <= 0)
		return NULL;
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (!slash || (size_t)(slash - buf) + 2 + len > size)
		return NULL;
	memcpy(slash + 1, lib, len + 1);
	return buf;
}

#endif
