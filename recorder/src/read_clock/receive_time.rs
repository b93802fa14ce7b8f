//! Kernel receive timestamps of TCP reads (Linux); elsewhere the user-space clock is used.
//! Public so that a reader outside the recorder (the benchmark's floors) takes the receive
//! time exactly as the recorder does.

#[cfg(not(target_os = "linux"))]
pub use elsewhere::{enable, recv, recv_into};
#[cfg(target_os = "linux")]
pub use linux::{enable, in_control, recv, recv_into};

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::mem::{size_of, MaybeUninit};
    use std::os::fd::{AsRawFd, RawFd};

    /// Asks the kernel to timestamp the segments socket `fd` receives (`SO_TIMESTAMPNS`).
    pub fn enable(fd: RawFd) -> io::Result<()> {
        let on: libc::c_int = 1;
        // SAFETY: a plain system call with a c_int option value of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One `recvmsg`: bytes read and the `SCM_TIMESTAMPNS` time (CLOCK_REALTIME ns), if any
    /// (there is none unless the socket's timestamping is on).
    pub fn recv(
        tcp: &std::net::TcpStream,
        buf: &mut [MaybeUninit<u8>],
    ) -> io::Result<(usize, Option<u64>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = [0u8; 64];
        // SAFETY: an all-zero msghdr is valid; the fields set below point at live buffers.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        // SAFETY: `msg` describes valid, writable buffers that outlive the call.
        let n = unsafe { libc::recvmsg(tcp.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let filled = control
            .get(..msg.msg_controllen as usize)
            .unwrap_or(&control);
        Ok((n as usize, in_control(filled)))
    }

    /// [`recv`] into initialized bytes.
    #[inline]
    pub fn recv_into(
        tcp: &std::net::TcpStream,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<u64>)> {
        // SAFETY: initialized bytes are valid `MaybeUninit` bytes; the read only writes bytes.
        let space = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        recv(tcp, space)
    }

    /// The `SCM_TIMESTAMPNS` time (CLOCK_REALTIME ns) among a read's control messages, as the
    /// kernel wrote them (`recvmsg`'s control buffer, or an io_uring completion's). The bytes
    /// need no alignment: each header and time is read unaligned, and a message that runs
    /// past the end stops the walk.
    pub fn in_control(control: &[u8]) -> Option<u64> {
        // SAFETY (both): pure arithmetic on lengths.
        let header = unsafe { libc::CMSG_LEN(0) } as usize;
        let space = |len: usize| unsafe { libc::CMSG_SPACE((len - header) as u32) } as usize;
        let mut at = 0;
        let mut received = None;
        while let Some(bytes) = control.get(at..at + size_of::<libc::cmsghdr>()) {
            // SAFETY: `bytes` holds a whole header, read unaligned.
            let cmsg: libc::cmsghdr = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            let len = cmsg.cmsg_len as usize;
            let Some(data) = control.get(at + header..at + len).filter(|_| len >= header) else {
                break;
            };
            if cmsg.cmsg_level == libc::SOL_SOCKET
                && cmsg.cmsg_type == libc::SCM_TIMESTAMPNS
                && data.len() >= size_of::<libc::timespec>()
            {
                // SAFETY: `data` holds a whole timespec, read unaligned.
                let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                received = Some((ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64);
            }
            at += space(len);
        }
        received
    }
}

#[cfg(not(target_os = "linux"))]
mod elsewhere {
    use std::io::{self, Read};
    use std::mem::MaybeUninit;
    use std::os::fd::RawFd;

    /// Receive timestamps are Linux's: refused here.
    pub fn enable(_fd: RawFd) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// One read: bytes read, and no receive time.
    pub fn recv(
        mut tcp: &std::net::TcpStream,
        buf: &mut [MaybeUninit<u8>],
    ) -> io::Result<(usize, Option<u64>)> {
        // SAFETY: zero-filling makes every byte initialized before the read borrows them.
        let buf = unsafe {
            std::ptr::write_bytes(buf.as_mut_ptr(), 0, buf.len());
            &mut *(buf as *mut [MaybeUninit<u8>] as *mut [u8])
        };
        Ok((tcp.read(buf)?, None))
    }

    /// [`recv`] into initialized bytes.
    pub fn recv_into(
        mut tcp: &std::net::TcpStream,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<u64>)> {
        Ok((tcp.read(buf)?, None))
    }
}
