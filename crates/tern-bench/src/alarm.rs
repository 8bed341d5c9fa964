//! A worker's alarm clock for the open loop: a timerfd in the worker's poll, so that the poll
//! wakes the workload's `spin` before a send is due, to the microsecond. epoll's own timeout
//! rounds up to whole milliseconds, so a thread could not sleep until less than a millisecond
//! before a send: at any rate over ~1,000 requests/s a thread, its CPU stayed 100 % busy
//! however idle the run (docs/bench.md, "How it measures").

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

pub(crate) struct Alarm(OwnedFd);

impl Alarm {
    /// An alarm that wakes `registry`'s poll with an event for `token` when it goes off.
    pub(crate) fn new(registry: &Registry, token: Token) -> io::Result<Alarm> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(Alarm(fd))
    }

    /// Goes off once, `after` from now (at least a nanosecond: a zero time disarms a timerfd),
    /// replacing any earlier setting. Setting a timerfd also clears what went off before, so
    /// it is never read: edge-triggered, each going-off wakes the poll once.
    pub(crate) fn set(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let spec = Itimerspec {
            it_interval: zero,
            it_value: Timespec {
                tv_sec: after.as_secs() as i64,
                tv_nsec: i64::from(after.subsec_nanos()),
            },
        };
        timerfd_settime(&self.0, TimerfdTimerFlags::empty(), &spec)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};

    /// Polls with a backstop far longer than any alarm here: whether the alarm's token came.
    fn went_off(poll: &mut Poll, token: Token) -> bool {
        let mut events = Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(30)))
            .unwrap();
        events.iter().any(|e| e.token() == token)
    }

    #[test]
    fn an_alarm_wakes_its_poll_each_time_it_is_set_and_a_setting_replaces_the_last() {
        let mut poll = Poll::new().unwrap();
        let token = Token(7);
        let alarm = Alarm::new(poll.registry(), token).unwrap();
        alarm.set(Duration::from_micros(200)).unwrap();
        assert!(went_off(&mut poll, token));
        // Never read: setting it again is enough for it to go off again.
        alarm.set(Duration::from_micros(200)).unwrap();
        assert!(went_off(&mut poll, token));
        // An hour away, then sooner: the sooner setting is the one that counts.
        alarm.set(Duration::from_secs(3600)).unwrap();
        alarm.set(Duration::from_micros(200)).unwrap();
        assert!(went_off(&mut poll, token));
        // Zero would disarm a timerfd: it goes off at once instead.
        alarm.set(Duration::ZERO).unwrap();
        assert!(went_off(&mut poll, token));
    }
}
