#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fbsgen: the C codec for Ferry's FlatBuffers schemas, generated at build time.

  fbsgen.py --prefix ferry__wire --out-dir DIR --name ferry_schema \\
            [--bfbs flatc.bfbs ...] [--include '<ferry/id.h>'] [-I DIR] schema.fbs ...

writes DIR/NAME.h and DIR/NAME.c (the codec: see emit_c.py), DIR/NAME_testgen.{h,c} (test
support: emit_test.py) and DIR/NAME_interop.h (C++ interop checks: emit_cpp.py).
With --bfbs (flatc --schema -b output for the same files) every type, field id, offset,
struct layout, default and enum value is checked against flatc's own parse first.
Unsupported schema features fail with file:line and a message; nothing is silently skipped.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bfbs  # noqa: E402
import schema  # noqa: E402
from emit_c import CEmitter  # noqa: E402
from emit_cpp import CppEmitter  # noqa: E402
from emit_test import TestEmitter  # noqa: E402


def guard(name):
    return 'FERRY_GENERATED_%s' % name.upper().replace('.', '_')


def write(path, text):
    """Write only when changed, so ninja does not rebuild dependents needlessly."""
    try:
        with open(path, encoding='utf-8') as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--prefix', required=True, help='C name prefix, e.g. ferry__wire')
    ap.add_argument('--name', required=True, help='output base name, e.g. ferry_schema')
    ap.add_argument('--out-dir', required=True)
    ap.add_argument('--include-path', default='',
                    help='directory of the outputs as seen by #include (e.g. schema)')
    ap.add_argument('--include', action='append', default=[],
                    help='extra #include for the header, e.g. "<ferry/id.h>"')
    ap.add_argument('--bfbs', action='append', default=[], help='flatc binary schema to check')
    ap.add_argument('-I', dest='include_dirs', action='append', default=[])
    ap.add_argument('schemas', nargs='+')
    args = ap.parse_args(argv)

    s = schema.Schema(args.include_dirs)
    try:
        for path in args.schemas:
            s.parse_file(path)
        schema.resolve(s)
        if args.bfbs:
            bfbs.check(s, args.bfbs)

        def inc(f):
            return '"%s"' % (args.include_path + '/' + f if args.include_path else f)

        sources = [os.path.basename(p) for p in s.files]
        c = CEmitter(s, args.prefix, inc(args.name + '.h'), args.include, sources)
        outputs = {
            args.name + '.h': c.header(guard(args.name + '.h')),
            args.name + '.c': c.source(),
        }
        t = TestEmitter(c)
        outputs[args.name + '_testgen.h'] = t.header(guard(args.name + '_testgen.h'))
        outputs[args.name + '_testgen.c'] = t.source(inc(args.name + '_testgen.h'))
        outputs[args.name + '_interop.h'] = CppEmitter(c).header(guard(args.name +
                                                                       '_interop.h'))
    except schema.SchemaError as e:
        print('fbsgen: error: %s' % e, file=sys.stderr)
        return 1
    for name, text in outputs.items():
        write(os.path.join(args.out_dir, name), text)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
