// Noticing that an HTTP client went away while its request runs. cpp-httplib hands handlers no
// socket, so the connection is found by its endpoints among this process's descriptors
// (Linux /proc/self/fd), then polled for the peer's close. Stateless; thread-safe.
#pragma once

#include <string>

namespace kvtier::server {

// The descriptor of the accepted TCP connection local_addr:local_port <-> remote_addr:
// remote_port (numeric addresses as cpp-httplib reports them), or -1 when none is found.
int FindConnection(const std::string& local_addr, int local_port,
                   const std::string& remote_addr, int remote_port);

// True when the peer has closed (or reset) connection `fd`. Never blocks; data waiting to be
// read (a pipelined request) is not a close.
bool PeerClosed(int fd);

}  // namespace kvtier::server
