#!/bin/sh
# Runs a command confined to the first CPU this script may use (taskset's
# list may start anywhere: a cpuset need not hold CPU 0).
#   one_cpu.sh COMMAND [ARGS...]
first=$(taskset -cp $$ | sed 's/.*: //; s/[,-].*//')
exec taskset -c "$first" "$@"
