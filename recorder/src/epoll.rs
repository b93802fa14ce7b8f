//! A thin owner of a Linux epoll instance: the stream reader's ([`crate::reader`]), and the
//! benchmark's epoll floor, which reads the same load with nothing else around it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An epoll instance, closed when dropped.
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new instance (close-on-exec).
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: a plain system call; the descriptor is owned below.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// `epoll_ctl(op, fd)` with interest `events` (`EPOLLIN`, …; level-triggered unless
    /// `EPOLLET` is among them), reported with `token`.
    pub fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: both descriptors are open; `event` is valid for the call.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Ready events into `events`, waiting at most `timeout` (rounded up to a millisecond);
    /// 0 on timeout or interruption.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `events` is writable for `events.len()` entries.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                ms,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(err)
            };
        }
        Ok(n as usize)
    }
}
