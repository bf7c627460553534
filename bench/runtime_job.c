/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job library of ferry-runtime-bench (runtime_bench.cc): the functions its rows submit,
 * loaded by the local cluster's workers as the job's code (ferry_init's code_path). Its
 * references to the runtime (ferry_register_function) resolve in the process that loads it.
 */
#include <ferry/runtime.h>

/* The empty task of `ray microbenchmark`'s task rows: no arguments, one empty return. */
FERRY_FUNCTION(noop)
{
	(void)ctx;
	return 0;
}
