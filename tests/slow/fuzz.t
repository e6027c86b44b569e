#!/usr/bin/env bash
# tests/fuzz.t with each harness's smoke run a minute long (`ninja test-slow`; `ninja test`
# fuzzes for 10 s): the corpus replays and the sandbox escape check as there.
FUZZ_SECONDS=${FUZZ_SECONDS:-60} exec "$(dirname "$0")/../fuzz.t"
