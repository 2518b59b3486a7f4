//! The `select!` macro: crossbeam-channel's syntax over [`Select`](super::Select)'s engine.

/// Waits on several queue operations and runs the arm of the one that completes, as
/// crossbeam-channel's `select!`: `recv(r) -> msg => body`, `send(s, m) -> res => body`,
/// then optionally `default => body` (when nothing is ready now) or
/// `default(timeout) => body` (when nothing was ready in time). When several operations
/// are ready, each is equally likely to be chosen ([`select_biased!`](crate::select_biased!)
/// chooses the first listed instead). `recv` arms accept any
/// [`Receiver`](crate::queue::Receiver), timers (`after`, `tick`, `never`) included.
///
/// `msg` is bound to `Result<T, RecvError>` and `res` to `Result<(), SendError<T>>`.
/// A send arm's message expression is evaluated the first time that arm is tried while
/// its send could complete (room, a waiting receiver, or disconnected), or when a
/// rendezvous send arm offers its message as the select parks; crossbeam evaluates it once
/// the arm is chosen. So an arm that never could send never evaluates its message, but one
/// that could, and then lost the room to another sender or the choice to another arm, has
/// built a message that is dropped. At most 32 operations per `select!`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::queue::{after, bounded, unbounded};
///
/// let (tx1, rx1) = bounded::<u32>(4);
/// let (tx2, rx2) = unbounded::<&str>();
/// tx2.send("hello").unwrap();
///
/// logbus::select! {
///     recv(rx1) -> msg => panic!("unexpected {msg:?}"),
///     recv(rx2) -> msg => assert_eq!(msg, Ok("hello")),
///     recv(after(Duration::from_secs(1))) -> _ => panic!("timed out"),
/// }
///
/// // Nothing is ready: the default arm runs.
/// let ran_default = logbus::select! {
///     recv(rx1) -> _ => false,
///     send(tx1, 7) -> res => { res.unwrap(); false }
///     default => true,
/// };
/// // The send arm was ready (room in `tx1`'s queue), so it ran.
/// assert!(!ran_default);
/// assert_eq!(rx1.try_recv(), Ok(7));
/// ```
#[macro_export]
macro_rules! select {
    ($($tokens:tt)*) => {
        $crate::__logbus_select!(@start false $($tokens)*)
    };
}

/// As [`select!`](crate::select!), with the same syntax, but when several operations are
/// ready the one listed first is always chosen (crossbeam-channel's `select_biased!`): no
/// random fairness, so an arm that is always ready starves the arms after it. Each round
/// tries the arms in the order they are written.
///
/// # Examples
///
/// ```
/// use logbus::queue::unbounded;
///
/// let (urgent_tx, urgent) = unbounded::<&str>();
/// let (bulk_tx, bulk) = unbounded::<&str>();
/// bulk_tx.send("bulk").unwrap();
/// urgent_tx.send("urgent").unwrap();
///
/// // Both are ready: the first arm wins, every time.
/// let got = logbus::select_biased! {
///     recv(urgent) -> msg => msg.unwrap(),
///     recv(bulk) -> msg => msg.unwrap(),
/// };
/// assert_eq!(got, "urgent");
/// ```
#[macro_export]
macro_rules! select_biased {
    ($($tokens:tt)*) => {
        $crate::__logbus_select!(@start true $($tokens)*)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __logbus_select {
    // `$bias`: `true` tries the arms in order (`select_biased!`), `false` shuffles them.
    (@start $bias:tt $($tokens:tt)*) => {
        $crate::__logbus_select!(
            @parse $bias () ()
            (__r0 __r1 __r2 __r3 __r4 __r5 __r6 __r7 __r8 __r9 __r10 __r11 __r12 __r13 __r14
             __r15 __r16 __r17 __r18 __r19 __r20 __r21 __r22 __r23 __r24 __r25 __r26 __r27
             __r28 __r29 __r30 __r31)
            (__a0 __a1 __a2 __a3 __a4 __a5 __a6 __a7 __a8 __a9 __a10 __a11 __a12 __a13 __a14
             __a15 __a16 __a17 __a18 __a19 __a20 __a21 __a22 __a23 __a24 __a25 __a26 __a27
             __a28 __a29 __a30 __a31)
            $($tokens)*
        )
    };
    // recv arms
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        recv($rx:expr $(,)?) -> $res:pat => $body:block, $($rest:tt)*) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$rx) (recv) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*) $($rest)*)
    };
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        recv($rx:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$rx) (recv) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*) $($rest)*)
    };
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        recv($rx:expr $(,)?) -> $res:pat => $body:expr, $($rest:tt)*) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$rx) (recv) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*) $($rest)*)
    };
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        recv($rx:expr $(,)?) -> $res:pat => $body:expr) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$rx) (recv) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*))
    };
    // send arms
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        send($tx:expr, $m:expr $(,)?) -> $res:pat => $body:block, $($rest:tt)*) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$tx) (send $m) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*) $($rest)*)
    };
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        send($tx:expr, $m:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$tx) (send $m) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*) $($rest)*)
    };
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        send($tx:expr, $m:expr $(,)?) -> $res:pat => $body:expr, $($rest:tt)*) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$tx) (send $m) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*) $($rest)*)
    };
    (@parse $bias:tt ($($arms:tt)*) ($($d:tt)*) ($r:ident $($rs:ident)*) ($a:ident $($as:ident)*)
        send($tx:expr, $m:expr $(,)?) -> $res:pat => $body:expr) => {
        $crate::__logbus_select!(@parse $bias ($($arms)* [(&$tx) (send $m) $r $a ($res) {$body}])
            ($($d)*) ($($rs)*) ($($as)*))
    };
    // default arms
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt default() => $body:block $(,)?) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::No) {$body})
    };
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt default() => $body:expr $(,)?) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::No) {$body})
    };
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt default => $body:block $(,)?) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::No) {$body})
    };
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt default => $body:expr $(,)?) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::No) {$body})
    };
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt default($t:expr $(,)?) => $body:block $(,)?) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::timeout($t)) {$body})
    };
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt default($t:expr $(,)?) => $body:expr $(,)?) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::timeout($t)) {$body})
    };
    // the end, no default
    (@parse $bias:tt ($($arms:tt)*) () $rs:tt $as:tt) => {
        $crate::__logbus_select!(@emit $bias ($($arms)*)
            ($crate::queue::__SelectWait::Until(None))
            { unreachable!("a select without default waits until an arm is chosen") })
    };
    (@parse $($other:tt)*) => {
        compile_error!("select!/select_biased!: expected `recv(r) -> res => body`, `send(s, msg) -> res => body`, `default => body` or `default(timeout) => body`, separated by commas, at most 32 operations, `default` last")
    };

    (@arm $h:ident (recv)) => { $crate::queue::__RecvArm::new($h) };
    (@arm $h:ident (send $m:expr)) => { $crate::queue::__SendArm::new($h, || $m) };

    (@emit $bias:tt ($([($($handle:tt)*) $kind:tt $r:ident $a:ident ($res:pat) $body:tt])*)
        ($($wait:tt)*) $default:tt) => {
        // One `match` binds every handle, so temporaries in the handle expressions
        // (`recv(Some(&r).unwrap_or(&never()))`) live until the select ends.
        match ($($($handle)*,)*) {
            ($($r,)*) => $crate::__logbus_select!(@run $bias ($([$kind $r $a ($res) $body])*) ($($wait)*) $default),
        }
    };
    (@run $bias:tt ($([$kind:tt $r:ident $a:ident ($res:pat) $body:tt])*) ($($wait:tt)*) $default:tt) => {{
        $( let mut $a = $crate::__logbus_select!(@arm $r $kind); )*
        let __which = $crate::queue::__select_run(
            &mut [$(&mut $a as &mut dyn $crate::queue::__SelectArm),*],
            $($wait)*,
            $bias,
        );
        let mut __n = 0usize;
        $(
            let $r = __which == ::core::option::Option::Some(__n);
            __n += 1;
        )*
        let _ = __n;
        $(
            if $r {
                let $res = $a.take();
                $body
            } else
        )* $default
    }};
}
