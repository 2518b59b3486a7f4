#!/usr/bin/env bash
# The loom models' mutation check: for each (site, model) pair below, weakens the ordering at
# the site in a scratch copy of the workspace (never the working tree), builds under
# `--cfg logbus_loom` and runs the one model, which must FAIL. Fails loudly when a mutant
# survives (the model passes), when a model is not found, or when a mutation no longer
# applies (its pattern does not occur exactly once in its file): a refactor that moves the
# line must move the mutation with it.
#
#   scripts/loom-mutations.sh                 # every pair
#   scripts/loom-mutations.sh reader-cursor   # the pairs whose mutation names contain a word
#
# One scratch copy and one target directory (target/loom-mutants) for every mutant, so each
# is an incremental debug build of the crate holding the model; a failing model fails within
# a second.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
target=${LOGBUS_MUTANTS_TARGET:-$root/target/loom-mutants}
scratch=$target/workspace
filters=("$@")

die() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }

names=() files=() patterns=() replacements=() models=()

# mutant NAME FILE PATTERN REPLACEMENT MODEL
#   MODEL: `lib::path::to::model` (the library's unit tests) or `TEST::model` (a test file of
#   loom-tests/, e.g. `ring::gating_holds_producer_back`).
mutant() {
    names+=("$1") files+=("$2") patterns+=("$3") replacements+=("$4") models+=("$5")
}

# Transactions: a read-committed fetch loads the high watermark before it takes the
# transaction table's lock; loaded after, its LSO can include the first record of a
# transaction opened in between (a read past the LSO).
mutant lso-hw-before-lock src/partition/txn.rs \
    $'                let hw = self.high_watermark();\n                Some(self.txn.table.lock().view(offset, hw))' \
    $'                let view = self.txn.table.lock().view(offset, u64::MAX);\n                let hw = self.high_watermark();\n                Some(ReadView { stable: view.stable.min(hw), ..view })' \
    lib::partition::loom_models::a_read_committed_fetch_never_reads_a_transaction_opening_meanwhile
# Transactions: init_transactions reads the epoch and writes the next under one lock; split
# in two, two racing inits get the same epoch and neither is fenced.
mutant txn-init-epoch-one-lock src/broker/txn.rs \
    $'get_two_epochs`).\n                    meta.bump_epoch(self.producer_ids());' \
    $'get_two_epochs`).\n                    let read = (meta.producer_id, meta.epoch);\n                    drop(txns);\n                    let mut txns = c.txns.lock();\n                    let meta = txns.get_mut(id).expect("known");\n                    (meta.producer_id, meta.epoch) = read;\n                    meta.bump_epoch(self.producer_ids());' \
    transactions::two_producers_racing_init_transactions_get_two_epochs
# Lending reads: the transaction mark asked again once the run is held; asked only before,
# a lend racing the first transactional append lends the open transaction's record.
mutant lend-txn-recheck-after-hold src/partition/lend.rs \
    $'        // `hold`, it could miss a transaction whose records `hold` then sees published.\n        if self.has_transactions() {' \
    $'        // `hold`, it could miss a transaction whose records `hold` then sees published.\n        if false {' \
    lib::partition::loom_models::a_lending_read_never_lends_a_transaction_opening_meanwhile
# The idempotent producer on one replica: the sequence check and the publish under one hold
# of the ring producer's lock (a second hold between them lets the fresh send in: sequence 0
# twice).
mutant idempotent-check-one-lock-hold src/partition/appender.rs \
    $'            // The check above and this publish in one hold of the lock: no other append' \
    $'            drop(handle);\n            let mut handle = self.handle.lock();' \
    lib::partition::loom_models::idempotent_sequences_follow_the_log
# A task's registration in a wait set: the SeqCst fence after it (Dekker with the notifier's).
mutant waker-registration-fence src/sync/wait_set.rs \
    $'            }\n        }\n        drop(reg);\n        fence(Ordering::SeqCst);' \
    $'            }\n        }\n        drop(reg);\n        fence(Ordering::Acquire);' \
    lib::sync::wait_set::loom_models::no_lost_wake_up_of_a_task
mutant waker-registration-fence src/sync/wait_set.rs \
    $'            }\n        }\n        drop(reg);\n        fence(Ordering::SeqCst);' \
    $'            }\n        }\n        drop(reg);\n        fence(Ordering::Acquire);' \
    lib::sync::wait_set::loom_models::one_wake_up_reaches_every_waiting_task
# A cancelled task's registration leaves the count of waiters.
mutant waker-cancel-count src/sync/wait_set.rs \
    $'            let removed = reg.wakers.remove(i);
            // Relaxed: as when a waiter leaves `wait_until`.
            self.waiters.fetch_sub(1, Ordering::Relaxed);' \
    $'            let removed = reg.wakers.remove(i);' \
    lib::sync::wait_set::loom_models::cancellation_racing_a_wake_up_loses_nothing
# A task's new registration with light notifiers: its heavy fence (a refreshed one has none).
for model in lib::sync::wait_set::loom_models::no_lost_wake_up_of_a_task_with_a_light_notifier \
    ring_async::a_task_read_racing_a_publish; do
    mutant waker-new-registration-heavy-fence src/sync/wait_set.rs \
        'if self.register_waker(slot, cx.waker()) && light_notifiers() {' \
        'if !self.register_waker(slot, cx.waker()) && light_notifiers() {' \
        "$model"
done
# A task reading the ring: its registration's heavy fence, the other side of the producers'
# light one (`notify_all_light`): `poll_until` told that notifiers are not light.
for model in a_task_read_racing_a_publish two_tasks_wait_for_one_publish \
    a_cancelled_read_racing_a_wake_up_loses_nothing an_event_stream_racing_a_publish; do
    mutant task-registration-heavy-fence src/ring/task.rs \
        $'                        &mut wait.slot,\n                        || true,' \
        $'                        &mut wait.slot,\n                        || false,' \
        "ring_async::$model"
done
# The queue's async API (tasks waiting on a queue, loom-tests/tests/queue_async.rs): the
# registration's fence against a send's publication (the unbounded queue: the bounded one's
# empty and full looks fence by themselves, so there the notifier's fence is the one that
# matters; under loom the bounded queue's notifications keep it, see
# `notify_all_after_rmw`).
mutant notify-fence src/sync/wait_set.rs \
    $'        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).\n        fence(Ordering::SeqCst);' \
    $'        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).\n        fence(Ordering::Acquire);' \
    queue_async::a_task_receives_a_message_sent_while_it_registers
mutant waker-registration-fence src/sync/wait_set.rs \
    $'            }\n        }\n        drop(reg);\n        fence(Ordering::SeqCst);' \
    $'            }\n        }\n        drop(reg);\n        fence(Ordering::Acquire);' \
    queue_async::a_task_receives_from_the_unbounded_queue
mutant notify-fence src/sync/wait_set.rs \
    $'        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).\n        fence(Ordering::SeqCst);' \
    $'        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).\n        fence(Ordering::Acquire);' \
    queue_async::a_task_waits_for_room
mutant notify-fence src/sync/wait_set.rs \
    $'        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).\n        fence(Ordering::SeqCst);' \
    $'        // SeqCst fence: pairs with the fence in `wait_until` (see the module docs).\n        fence(Ordering::Acquire);' \
    queue_async::a_parked_thread_and_a_waiting_task_share_a_queue
# Every wake-up wakes every registered task: waking only one loses the wake-up when that
# task's future is dropped (cancelled) instead of receiving.
mutant wake-every-task src/sync/wait_set.rs \
    'for waker in batch.iter_mut().filter_map(Option::take) {' \
    'if let Some(waker) = batch.iter_mut().find_map(Option::take) {' \
    queue_async::a_cancelled_receive_racing_a_wake_up_loses_nothing
mutant wake-every-task src/sync/wait_set.rs \
    'for waker in batch.iter_mut().filter_map(Option::take) {' \
    'if let Some(waker) = batch.iter_mut().find_map(Option::take) {' \
    queue_async::two_waiting_tasks_one_message_and_the_end
# An owned array queue's notifiers use the light fence: a registering task issues the heavy
# one (`light_notifiers` in src/queue/array/task.rs).
mutant task-heavy-fence src/queue/array/task.rs \
    '        !self.owners.is_shared()' \
    '        false' \
    lib::queue::array::loom_models::a_task_waiting_on_an_owned_queue_gets_its_wake_up
mutant task-heavy-fence src/queue/array/task.rs \
    '        !self.owners.is_shared()' \
    '        false' \
    lib::queue::array::loom_models::a_task_waiting_for_room_in_an_owned_queue_gets_its_wake_up
# The rendezvous queue wakes its tasks at every change of its state.
mutant zero-wakes-tasks src/queue/zero.rs \
    $'        // to check it, so either it sees the change or this sees its registration.\n        self.tasks.notify_all();' \
    $'        // to check it, so either it sees the change or this sees its registration.' \
    queue_async::two_tasks_meet_on_a_rendezvous_queue
# The ring's reader cursor (the producers' Acquire loads of it in `GateView::min_gate`).
mutant reader-cursor-store src/ring/reader.rs \
    'self.cursor.next.store(self.next, Ordering::Release);' \
    'self.cursor.next.store(self.next, Ordering::Relaxed);' \
    ring::gating_holds_producer_back
mutant reader-cursor-store src/ring/reader.rs \
    'self.cursor.next.store(self.next, Ordering::Release);' \
    'self.cursor.next.store(self.next, Ordering::Relaxed);' \
    lib::partition::loom_models::a_gate_moved_past_a_lent_run_hands_it_to_the_producer
# A multi-producer lap: the wait for the previous lap's tag.
mutant previous-lap-wait src/ring/slot.rs \
    $'Release store.\n            while self.state.load(Ordering::Acquire) != prev_tag << ACCESS_BITS {' \
    $'Release store.\n            while self.state.load(Ordering::Relaxed) != prev_tag << ACCESS_BITS {' \
    ring::two_producers_lap_with_no_reader
mutant previous-lap-wait src/ring/slot.rs \
    $'Release store.\n            while self.state.load(Ordering::Acquire) != prev_tag << ACCESS_BITS {' \
    $'Release store.\n            while self.state.load(Ordering::Relaxed) != prev_tag << ACCESS_BITS {' \
    ring::two_producers_lap_after_their_gating_reader_leaves
# The single producer's published cursor (its fast path).
mutant published-cursor src/ring/sequencer.rs \
    'shared.published.store(seq + 1, Ordering::Release);' \
    'shared.published.store(seq + 1, Ordering::Relaxed);' \
    ring::single_producer_publish_and_read
# The close's wake-up of parked readers, left out.
mutant close-wakes-readers src/ring/shared.rs \
    $'self.closed_at.fetch_min(end, Ordering::Release);\n        self.readers_wait.notify_all();' \
    'self.closed_at.fetch_min(end, Ordering::Release);' \
    ring::close_racing_a_parked_reader
# Plain values: the single-entry fast path not marking the ring impure (the flag readers
# ask before they read a run without asking each entry's shape).
mutant fast-path-impure src/ring/sequencer.rs \
    $'            // Before the write (module docs, "Plain values").\n            shared.mark_impure();\n        }\n        // The write below drops what it replaces (or `T` has no drop glue).' \
    $'        }\n        // The write below drops what it replaces (or `T` has no drop glue).' \
    lib::partition::loom_models::a_lending_read_sees_the_headers_of_every_entry_it_lends
# Plain values: the single producer's record of the slots that hold values needing their
# drop. The single-entry fast path not marking its slot, the straight-line run path and the
# general run path not asking the record: each leaks the box a plain run overwrites.
mutant fast-path-impure-slot src/ring/sequencer.rs \
    $'        Self::note_slot(shared, &mut self.impure_slots, seq, plain);\n        let lock' \
    $'        let lock' \
    lib::partition::loom_models::plain_runs_drop_the_headers_they_overwrite
mutant straight-line-impure-slots src/ring/sequencer.rs \
    '&& self.impure_slots.next_marked(self.next, self.next + len) != self.next + len)' \
    '&& false)' \
    lib::partition::loom_models::copied_runs_in_the_fast_path_drop_the_headers_they_overwrite
for model in copied_runs_drop_the_headers_they_overwrite \
    copied_runs_over_a_boxed_entry_are_read_whole_through_the_gate; do
    mutant run-impure-slots src/ring/sequencer.rs \
        'self.impure_slots.next_marked(at, end)' \
        'end' \
        "lib::partition::loom_models::$model"
done
# The single producer's published cursor after a plain run over marked slots.
mutant marked-run-published-cursor src/ring/sequencer.rs \
    $'                // Release: publishes the run\'s slot writes to readers\' Acquire loads.\n                shared.published.store(end, Ordering::Release);' \
    $'                // Release: publishes the run\'s slot writes to readers\' Acquire loads.\n                shared.published.store(end, Ordering::Relaxed);' \
    lib::partition::loom_models::copied_runs_over_a_boxed_entry_are_read_whole_through_the_gate
# The array queue's shared protocol: its stamps.
mutant stamp-store src/queue/array/shared.rs \
    'const STAMP_STORE: Ordering = Ordering::Release;' \
    'const STAMP_STORE: Ordering = Ordering::Relaxed;' \
    queue::two_producers_one_consumer
# The array queue's drain: its wait for a send claimed before the disconnection.
mutant awaited-load src/queue/array/shared.rs \
    'const AWAITED_LOAD: Ordering = Ordering::Acquire;' \
    'const AWAITED_LOAD: Ordering = Ordering::Relaxed;' \
    lib::queue::array::loom_models::a_drain_waits_out_a_send_claimed_before_the_disconnection
# The array queue's owned protocol: the owners' cursors and the fences of exact looks.
mutant own-cursor-store src/queue/array/owned.rs \
    'const OWN_CURSOR_STORE: Ordering = Ordering::Release;' \
    'const OWN_CURSOR_STORE: Ordering = Ordering::Relaxed;' \
    lib::queue::array::loom_models::owners_pass_messages_through_a_full_and_an_empty_queue
mutant owned-full-fence src/queue/array/owned.rs \
    $'            if free == 0 && look.settle {\n                // SeqCst: pairs with the receiving owner\'s fence before it reports `Empty`\n                // (Dekker: one of the two sees the other\'s cursor store).\n                fence(Ordering::SeqCst);' \
    $'            if free == 0 && look.settle {' \
    lib::queue::array::loom_models::owned_try_operations_are_linearizable
mutant owned-empty-fence src/queue/array/owned.rs \
    $'                // SeqCst: pairs with the sending owner\'s fence before it reports `Full`.\n                fence(Ordering::SeqCst);' \
    '' \
    lib::queue::array::loom_models::owned_try_operations_are_linearizable
# The unbounded queue's block recycling.
mutant list-recycle-cas src/queue/list.rs \
    '.compare_exchange(ptr::null_mut(), block, Ordering::Release, Ordering::Relaxed)' \
    '.compare_exchange(ptr::null_mut(), block, Ordering::Relaxed, Ordering::Relaxed)' \
    lib::queue::list::loom_models::a_recycled_block_is_written_again_by_another_thread
# A replicated partition's open chunk: the claim of a slot as a load then a store.
mutant chunk-claim-cas src/partition/replica_log/chunk.rs \
    $'        if self\n            .filled\n            .compare_exchange(i, i | BUSY, Ordering::Acquire, Ordering::Relaxed)\n            .is_err()\n        {\n            return Err(entry);\n        }' \
    $'        if self.filled.load(Ordering::Acquire) != i {\n            return Err(entry);\n        }\n        self.filled.store(i | BUSY, Ordering::Relaxed);' \
    lib::partition::replica_log::chunk::loom_models::two_writers_of_one_slot_write_once


# A consumer task parked in `poll_async`: its check after registering, and the heavy fence
# completing the handshake with the producers' light notification.
mutant consumer-task-recheck src/consumer/async_poll.rs \
    $'            self.register_task(cx);\n            if !self.task_ready() {' \
    $'            self.register_task(cx);\n            if true {' \
    topics_async::a_record_wakes_a_consumer_task
mutant consumer-task-heavy-fence src/consumer/async_poll.rs \
    $'        // The heavy side of the handshake with the producers\' light notification.\n        asym_fence::heavy();' \
    $'        // The heavy side of the handshake with the producers\' light notification.' \
    topics_async::a_record_wakes_a_consumer_task
# A member's task: its check of the group signal after registering (a rebalance raised
# between its group duties and its registration must not be slept through).
mutant member-task-signal-check src/consumer/async_poll.rs \
    $'        called\n            || self.assigned.iter().any(|a| {' \
    $'        false\n            || self.assigned.iter().any(|a| {' \
    topics_async::a_rebalance_wakes_a_member_task
# A send awaiting room: the heavy fence of its registration in the producers' wait set
# (gating readers notify it with the light fence).
mutant send-room-heavy-fence src/ring/mod.rs \
    'shared.producers_wait.poll_until(cx, slot, || true, ready)' \
    'shared.producers_wait.poll_until(cx, slot, || false, ready)' \
    topics_async::a_commit_wakes_a_send_awaiting_room

selected() {
    local name=$1 f
    [ ${#filters[@]} -eq 0 ] && return 0
    for f in "${filters[@]}"; do
        [[ $name == *"$f"* ]] && return 0
    done
    return 1
}

# A fresh copy of the tracked files as they are in the working tree, at a fixed path (so the
# builds of one run, and of the next, are incremental).
rm -rf "$scratch"
mkdir -p "$scratch"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$scratch"

# No backtraces: printing one from a loom thread can overflow its stack and hang.
export RUSTFLAGS="--cfg logbus_loom" LOOM_MAX_PREEMPTIONS=2 RUST_BACKTRACE=0
export CARGO_TARGET_DIR=$target
start=$SECONDS
caught=()
for i in "${!names[@]}"; do
    name=${names[$i]} file=${files[$i]} model=${models[$i]}
    selected "$name" || continue
    cp "$root/$file" "$scratch/$file"
    PAT=${patterns[$i]} REP=${replacements[$i]} perl -0777 -i -pe '
        BEGIN { $p = $ENV{PAT}; $r = $ENV{REP} }
        my $n = () = /\Q$p\E/g;
        die "the pattern occurs $n times (exactly once expected)\n" unless $n == 1;
        s/\Q$p\E/$r/;
    ' "$scratch/$file" || die "mutation $name no longer applies to $file"
    case $model in
        lib::*) args=(-p logbus --lib) test=${model#lib::} ;;
        *::*) args=(-p logbus-loom-tests --test "${model%%::*}") test=${model#*::} ;;
        *) die "model $model: neither lib::... nor FILE::..." ;;
    esac
    printf '\n==> %s: %s must fail\n' "$name" "$model"
    exe=$(cd "$scratch" && cargo test "${args[@]}" --no-run --quiet --message-format=json \
        | grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4) \
        || die "mutant $name does not build"
    [ -n "$exe" ] || die "mutant $name: no test binary for $model"
    log=$target/$i-$name.log
    # --nocapture: libtest's output capture can hang after a panic inside a loom thread.
    set +e
    (cd "$scratch" && timeout 300 "$exe" --exact "$test" --nocapture) >"$log" 2>&1
    status=$?
    set -e
    cp "$root/$file" "$scratch/$file"
    # Caught: the model failed, or panicked and then aborted (loom's cell guards can panic
    # again while the first failure unwinds).
    if grep -q '^test result: ok\. 1 passed' "$log"; then
        tail -n 20 "$log" >&2
        die "mutant $name survived: $model passed"
    fi
    if ! grep -q '^test result: FAILED\. 0 passed; 1 failed' "$log" \
        && ! { [ "$status" -ne 124 ] && grep -qF "thread '$test' " "$log"; }; then
        tail -n 20 "$log" >&2
        die "mutant $name: $model did not run as one failing test (exit $status; log $log)"
    fi
    # The panic's message: the line after loom's "panicked at <location>:".
    why=$(grep -m1 -A1 'panicked at' "$log" | tail -n 1)
    printf 'caught: %s\n' "${why:-failed}"
    caught+=("$name -> $model")
done
[ ${#caught[@]} -gt 0 ] || die "no mutation selected by: ${filters[*]}"
printf '\n==> %d mutants caught in %ds:\n' "${#caught[@]}" $((SECONDS - start))
printf '  %s\n' "${caught[@]}"
