// Connection lookup and peer-close polling (server/conn_watch.h). Linux only.
#include "server/conn_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace kvtier::server {
namespace {

// "addr" and port of a socket address (IPv4, IPv6; IPv4-mapped IPv6 as plain IPv4).
bool Endpoint(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf)) == nullptr) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf)) == nullptr) return false;
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  if (addr->rfind("::ffff:", 0) == 0 && addr->find('.') != std::string::npos) {
    *addr = addr->substr(7);
  }
  return true;
}

bool Same(const std::string& a, const std::string& b) {
  auto plain = [](const std::string& s) {
    return s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos ? s.substr(7) : s;
  };
  return plain(a) == plain(b);
}

}  // namespace

int FindConnection(const std::string& local_addr, int local_port,
                   const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof(peer), sl = sizeof(self);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) {
      continue;
    }
    std::string pa, sa;
    int pp = 0, sp = 0;
    if (!Endpoint(peer, &pa, &pp) || !Endpoint(self, &sa, &sp)) continue;
    if (pp == remote_port && sp == local_port && Same(pa, remote_addr) && Same(sa, local_addr)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace kvtier::server
