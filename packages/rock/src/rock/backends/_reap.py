"""The bash that ends a command's processes inside a docker sandbox, wherever they went.

Three scripts share one function, :data:`REAP_FUNCTION`, all of it bash builtins over
/proc (so it runs in any image with bash, and needs no new process when a fork bomb holds
every pid): the container's keeper (its first process), the wrapper every command runs
under, and the reaper a timeout or an interrupt starts.
"""

from __future__ import annotations

# Stop and kill the processes of one command, with builtins only (so it still runs when a
# fork bomb holds every pid the sandbox may use): every process whose environment carries
# the command's mark ROCK_EXEC_ID=<id> (which it keeps when it leaves the command's process
# group or session, double-forks or closes its stdio), every descendant of a root pid, and
# every process still writing to the output files named (the command's pipes). Each round
# stops what it finds that is not stopped yet; stopped processes cannot fork, so the rounds
# end (with a fork bomb too: it cannot outrun them), and then all of them are killed.
# Processes found on the output get a moment to leave it first (`cmd > log &` run last, on
# a busy machine): while one of them is still running, or is still a fork of the command's
# bash that has not become its program yet (it may be redirecting away from the output), up
# to 3 s, in pauses of 0.1 s that need no new process (rock_pause).
# A fork bomb turns each round into a freeze: every process the reaper may signal is stopped
# first (rock_stop_all), so the scan runs at full speed with nothing forking, and the others
# go on at the end, and the process groups the bomb's processes are in (not the reaper's
# own) are killed until empty, again before every later round. A bomb is more than 16
# processes still on the output, or more than 8 new ones there since the last scan (under
# gVisor each scan of /proc while a bomb runs is slower than the last, 5-30 s on a busy
# machine, so a scan stops at the first sign), or new ones after 4 rounds of stops (children
# forked as a stop lands get none there). A reap that stopped anything scans once more, a
# moment later, before it ends (such a child may not be in /proc yet when a scan begins).
# Arguments: the mark ("-" for none), the root pid (0 for none), 1 to keep the root itself
# alive (a session's shell), then optionally the command's stdout and stderr as paths.
REAP_FUNCTION = r"""
rock_pause() {  # 0.1 s without a new process or a file: a read that times out on a UDP
  read -r -t 0.1 _ </dev/udp/127.0.0.1/9 2>/dev/null  # socket nothing sends to (loopback)
  (($? > 128)) || read -r -t 0.1 _ 0<>/dev/ptmx 2>/dev/null  # (bash without /dev/udp)
}
rock_stop_all() {  # stop every process the caller may signal, back to back: a child forked
  local i  # as one stop landed got none (gVisor), the next stops it before it forks much
  for ((i = 0; i < 30; i++)); do kill -STOP -1 2>/dev/null; done
}
rock_end_group() {  # kill process group $1 until it is empty: under gVisor a fork under way
  local i quiet=0  # as a signal lands brings a child that got none; a pause now and then lets
  for ((i = 0; i < 200 && quiet < 3; i++)); do  # init reap the dead (members until reaped)
    if kill -KILL -- "-$1" 2>/dev/null; then  # and one that finds the group empty is tried
      quiet=0  # twice more, a moment apart: there such a child may not be in it yet
      ((i % 20 == 19)) && { rock_stop_all; rock_pause; }
    else
      ((quiet++)); rock_pause
    fi
  done
}
rock_reap() {
  local mark=$1 root=$2 keep=${3:-0} out=${4:-} err=${5:-} round f p s g e hit busy mine born
  local me=$BASHPID froze= settle=0 stops=0 confirmed=
  local -a fresh todo ev pending
  local -A kids seen groups last
  read -r s <"/proc/$me/stat"; s=${s##*) }; s=${s#* * }; mine=${s%% *}
  [ "$keep" = 1 ] && [ "$root" -gt 0 ] && kill -INT "$root" 2>/dev/null
  for ((round = 0; round < 200; round++)); do
    [ -n "${rock_freezing:-}" ] && rock_stop_all  # (the keeper's freeze: all of the sandbox)
    [ -n "$froze" ] && for g in "${!groups[@]}"; do rock_end_group "$g"; done  # (a bomb's)
    kids=(); fresh=(); busy=0 born=0
    for f in /proc/[0-9]*; do
      p=${f#/proc/}
      [ "$p" = "$me" ] && continue
      if [ "$root" -gt 0 ] && read -r s 2>/dev/null <"$f/stat"; then
        s=${s##*) }; s=${s#* }; kids[${s%% *}]+=" $p"
      fi
      [ -n "${seen[$p]}" ] && continue
      hit=0
      if [ -n "$out" ] && { [ "$f/fd/1" -ef "$out" ] || [ "$f/fd/2" -ef "$err" ]; }; then
        hit=1  # still leaving: running, or a shell's fork not yet its program (redirecting)
        if read -r s 2>/dev/null <"$f/stat"; then
          [[ $s == "$p (bash) "* ]] && busy=1
          s=${s##*) }; [ "${s%% *}" = R ] && busy=1
          s=${s#* * }; g=${s%% *}; ((g > 1 && g != mine)) && groups[$g]=1
        fi
      elif [ "$mark" != - ]; then
        ev=(); mapfile -d '' -t ev 2>/dev/null <"$f/environ"
        for e in "${ev[@]}"; do
          [ "$e" = "ROCK_EXEC_ID=$mark" ] && { hit=1; break; }
        done
      fi
      ((hit)) || continue
      fresh+=("$p")  # a bomb is frozen as soon as one is sure (a scan races it for the CPU)
      [ -n "${last[$p]}" ] || ((born++))
      ((${#seen[@]} == 0 && settle < 30 && (${#fresh[@]} > 16 || (settle && born > 8)))) &&
        [ -n "$out" ] && break
    done
    if [ "$root" -gt 0 ] && [ -d "/proc/$root" ]; then
      todo=("$root")
      while ((${#todo[@]})); do
        p=${todo[0]}; todo=("${todo[@]:1}")
        { [ "$keep" = 1 ] && [ "$p" = "$root" ]; } || [ -n "${seen[$p]}" ] || fresh+=("$p")
        todo+=(${kids[$p]})
      done
    fi
    if ((${#fresh[@]} == 0)); then
      if ((${#pending[@]})); then
        kill -KILL "${pending[@]}" 2>/dev/null  # then scan again: under gVisor a process
        pending=() confirmed=  # killed as it forks can leave a child that nothing stopped
        continue
      fi
      { { ((${#seen[@]})) || [ -n "$froze" ]; } && [ -z "$confirmed" ]; } || break
      confirmed=1  # one more scan, a moment on, before the end: under gVisor a child forked
      rock_pause  # as a stop landed got none, and may not be in /proc yet when a scan began
      continue
    fi
    last=(); for p in "${fresh[@]}"; do last[$p]=1; done
    if ((${#seen[@]} == 0 && settle < 30 && (${#fresh[@]} > 16 || (settle && born > 8)))) ||
      ((stops == 4)); then
      settle=30 stops=5  # a fork bomb: freeze, and end the process groups it went to
      [ -n "${rock_freezing:-}" ] || { rock_freezing=1 froze=1; rock_stop_all; }
      [ -n "$froze" ] || for g in "${!groups[@]}"; do rock_end_group "$g"; done
      continue  # (from this round on, each scan runs with everything stopped and the bomb's
      # process groups killed until empty first)
    fi
    if [ -n "$out" ] && ((${#seen[@]} == 0 && settle < 30 && (settle == 0 || busy))); then
      ((settle++))  # a job put in the background just now may still be leaving the output
      rock_pause
      continue  # so wait while one of them is still running, up to 3 s
    fi
    ((stops++))
    kill -STOP "${fresh[@]}" 2>/dev/null
    for p in "${fresh[@]}"; do seen[$p]=1; done
    pending+=("${fresh[@]}")
  done
  ((${#pending[@]})) && kill -KILL "${pending[@]}" 2>/dev/null
  [ "$keep" = 1 ] || [ "$root" -le 0 ] || kill -KILL -- "-$root" 2>/dev/null
  [ -n "$froze" ] && { rock_freezing=; kill -CONT -1 2>/dev/null; }  # the others go on
  return 0
}
"""
KILL_TREE = (
    REAP_FUNCTION
    + r"""
rock_reap "${3:--}" "$1" "${2:-0}"
for f in /proc/[0-9]*; do  # a command killed during its wrapper's freeze (a fork bomb's, see
  a=(); mapfile -d '' -t a 2>/dev/null <"$f/cmdline"  # above) left the others stopped, the
  ((${#a[@]})) && [ "${a[-1]}" = rock-keeper ] || continue  # keeper with them: go on
  read -r s 2>/dev/null <"$f/stat" && s=${s##*) } && [ "${s%% *}" = T ] && kill -CONT -1
  break
done 2>/dev/null
"""
)
"""A bash script: ``kill-tree ROOT_PID KEEP_ROOT [MARK]`` (see :data:`REAP_FUNCTION`)."""

_KEEPER = (
    REAP_FUNCTION
    + r"""
# End every process group that holds a process marked $1 (but the group of the kept root
# $2 when $3 is 1, and the keeper's): a group is killed again until it is empty, since under
# gVisor a fork under way as a signal lands brings a child that got none. One kill reaches a
# whole fork bomb (its processes keep their group), and it is over before a scan of /proc,
# starved by a bomb's children, could stop them one by one.
rock_end_groups() {
  local mark=$1 root=$2 keep=$3 f p s g e mine skip
  local -a ev
  local -A done
  read -r s <"/proc/$BASHPID/stat"; s=${s##*) }; s=${s#* * }; mine=${s%% *}
  skip=-
  if [ "$keep" = 1 ] && [ "$root" -gt 0 ] && read -r s 2>/dev/null <"/proc/$root/stat"; then
    s=${s##*) }; s=${s#* * }; skip=${s%% *}
  fi
  for f in /proc/[0-9]*; do
    read -r s 2>/dev/null <"$f/stat" || continue
    s=${s##*) }; s=${s#* * }; g=${s%% *}
    { [ -n "${done[$g]}" ] || [ "$g" = "$mine" ] || [ "$g" = "$skip" ] || [ "$g" -le 1 ]; } && continue
    ev=(); mapfile -d '' -t ev 2>/dev/null <"$f/environ"
    for e in "${ev[@]}"; do
      [ "$e" = "ROCK_EXEC_ID=$mark" ] || continue
      done[$g]=1
      rock_end_group "$g"
      break
    done
  done
}
trap 'exit 0' TERM
while :; do
  if read -r verb mark root keep; then
    if [ "$verb" = freeze ]; then
      rock_stop_all
      rock_end_groups "$mark" "${root:-0}" "${keep:-0}"
      rock_freezing=1  # each round of the reap stops all first: what escaped a stop is
      for pass in 1 2 3; do  # caught before the round's scan of /proc, which runs at full
        rock_reap "$mark" "${root:-0}" "${keep:-0}"  # speed with nothing else running
      done
      rock_freezing=
      kill -CONT -1 2>/dev/null
      printf 'rock-frozen %s\n' "$mark"  # (the daemon waits for it: the sandbox is clean)
    elif [ "$verb" = reap ]; then
      rock_reap "$mark" "${root:-0}" "${keep:-0}"
    fi
  else
    while :; do sleep 3600 & wait $!; done
  fi
done
"""
)
"""The container's keeper (its first process under the init): it keeps the container up and
reaps a command's processes when told on the container's stdin (``reap MARK ROOT KEEP``).
It was started before any command, so it needs no new pid to act, even when a fork bomb
holds all of them; images without bash keep the container up with a plain sleep loop.

``freeze MARK ROOT KEEP`` first stops every process it may signal (``kill -STOP -1``, one
call whatever their number, sent 30 times back to back), ends every process group that holds
a marked process (killed until empty), reaps the rest with every round of the reap stopping
all first, then lets the others go on (``kill -CONT -1``). It is for a sandbox out of pids,
where no reaper can start. When it is done it says ``rock-frozen MARK`` on its stdout,
which the daemon waits for before it answers the command. Under gVisor a fork under way as the stop lands brings a child
that was not stopped; a bomb's such children forked on and took the CPU from the keeper's
scan of /proc (a pass of it took 20 s and more, and the sandbox refilled its 512 pids). One
kill of the bomb's process group, sent at the first marked process the scan meets, ends most
of it; a reap whose rounds stopped only what each scan had found never caught up with the
rest (seen in CI: the bomb still running minutes later, the keeper scanning), so every round
stops everything again, and its scan runs at full speed. The others of the sandbox (a
session's command, a background job) are only paused for that long."""
KEEPALIVE = [
    "sh",
    "-c",
    'command -v bash >/dev/null 2>&1 && exec bash -c "$1" rock-keeper; '
    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done",
    "sh",
    _KEEPER,
]
WRAP_BASH = (
    REAP_FUNCTION
    + r"""
unset ROCK_WRAP
printf '__ROCK_PID %s bash\n' $$ >&2
exec 3>&1 4>&2 2>/dev/null
"$@" 1>&3 2>&4 3>&- 4>&-
rc=$?
rock_reap - 0 0 /proc/$$/fd/3 /proc/$$/fd/4
exit $rc
"""
)
"""Every command runs under this bash (its pid is the command's root): when the command
exits, the processes it left still writing to its output (``cmd &``, a fork bomb's) are
stopped and killed, with builtins only. A process that detached from it (``cmd > log 2>&1
&``, a daemon that closed its stdio) stays, as a deliberately backgrounded job; a timeout or
an interrupt ends those too (by their ROCK_EXEC_ID, see :data:`REAP_FUNCTION`)."""
WRAP_SH = (
    'command -v bash >/dev/null 2>&1 && exec bash -c \'eval "$ROCK_WRAP"\' rock-exec "$@"; '
    'unset ROCK_WRAP; printf "__ROCK_PID %s\\n" $$ >&2; exec "$@"'
)
"""How a command starts: the wrapper comes in the environment variable ROCK_WRAP (which it
removes), so the sandbox's process list shows the command, not the wrapper's text. Images
without bash run the command itself, which ends on its own."""
