#!/usr/bin/env bash
# kiln's command line: help, version, usage errors (exit 2), failures (exit 1).
. "$(dirname "$0")/lib.sh"
plan 9
run_kiln --help; expect_rc 0 "--help exits 0"; expect_out "usage: kiln" "--help prints usage on stdout"
run_kiln --version; expect_rc 0 "--version exits 0"; expect_out "^kiln [0-9]+\.[0-9]+\.[0-9]+" "--version prints the version"
run_kiln frobnicate; expect_rc 2 "an unknown command is a usage error"; expect_err "E_USAGE" "usage errors are typed"
run_kiln build specs/bias_gelu.lua; expect_rc 2 "build without --sm is a usage error"
run_kiln check --nonsense specs/bias_gelu.lua; expect_rc 2 "an unknown option is a usage error"
run_kiln check no/such/spec.lua; expect_rc 1 "a missing spec file is a failure (exit 1)"
done_testing
