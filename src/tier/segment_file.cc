// Segment file header and record walk (segment_file.h, docs/formats/kv-segment-file.md).
// Stateless; thread-safe.
#include "tier/segment_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/crc32c.h"
#include "base/le_bytes.h"

namespace kvtier::tier {
namespace {

constexpr uint8_t kSegMagic[8] = {'K', 'V', 'T', 'S', 'E', 'G', 0x1A, '\n'};
constexpr size_t kHeadRead = 4096;  // first read of a record: its whole header, usually

Status Bad(const std::string& name, const std::string& what) {
  return Status::Corruption(name + ": " + what);
}

}  // namespace

std::string SegmentName(uint64_t segment_id) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(segment_id));
  return b;
}

void EncodeSegmentHeader(uint64_t segment_id, uint32_t n_records,
                         uint8_t out[kSegmentHeaderBytes]) {
  std::memset(out, 0, kSegmentHeaderBytes);
  std::memcpy(out, kSegMagic, 8);
  PutLe32(out + 8, kSegmentFileVersion);
  PutLe32(out + 12, kSegmentHeaderBytes);
  PutLe64(out + 16, segment_id);
  PutLe32(out + 24, n_records);
  PutLe32(out + 28, 0);  // flags
  PutLe32(out + 32, 0);  // reserved
  PutLe32(out + 36, Crc32c({out, kSegmentHeaderBytes - 4}));
}

Result<SegmentHeader> DecodeSegmentHeader(std::span<const uint8_t> b, const std::string& name) {
  if (b.size() < 12 || std::memcmp(b.data(), kSegMagic, 8) != 0) {
    return Bad(name, "magic is not KVTSEG");
  }
  const uint32_t version = GetLe32(b.data() + 8);
  if (version > kSegmentFileVersion) {
    return Status::Unimplemented(name + ": segment file version " + std::to_string(version) +
                                 " is newer than this kvtier (" +
                                 std::to_string(kSegmentFileVersion) + ")");
  }
  if (version < 2) return Bad(name, "version " + std::to_string(version));
  if (b.size() < kSegmentHeaderBytes) return Bad(name, "shorter than a segment header");
  if (GetLe32(b.data() + 12) != kSegmentHeaderBytes) {
    return Bad(name, "header_bytes " + std::to_string(GetLe32(b.data() + 12)));
  }
  if (GetLe32(b.data() + 36) != Crc32c({b.data(), kSegmentHeaderBytes - 4})) {
    return Bad(name, "segment header CRC-32C mismatch");
  }
  if (GetLe32(b.data() + 28) != 0 || GetLe32(b.data() + 32) != 0) {
    return Bad(name, "flags / reserved not 0");
  }
  SegmentHeader h;
  h.segment_id = GetLe64(b.data() + 16);
  h.n_records = GetLe32(b.data() + 24);
  if (h.n_records == 0) return Bad(name, "no records");
  return h;
}

Result<SegmentIndex> ReadSegmentIndex(const RandomAccessFile& file, const std::string& name) {
  const uint64_t size = file.size();
  std::vector<uint8_t> buf(kHeadRead);
  KVTIER_ASSIGN_OR_RETURN(size_t n, file.Read(0, std::min<uint64_t>(size, kSegmentHeaderBytes),
                                               buf.data()));
  SegmentIndex idx;
  KVTIER_ASSIGN_OR_RETURN(idx.header, DecodeSegmentHeader({buf.data(), n}, name));
  uint64_t off = kSegmentHeaderBytes;
  for (uint32_t i = 0; i < idx.header.n_records; ++i) {
    const std::string rname = name + " record " + std::to_string(i) + " at " + std::to_string(off);
    if (off >= size) return Bad(rname, "the file ends first (" + std::to_string(size) + " bytes)");
    buf.resize(kHeadRead);
    KVTIER_ASSIGN_OR_RETURN(n, file.Read(off, std::min<uint64_t>(size - off, kHeadRead),
                                         buf.data()));
    buf.resize(n);
    if (n >= 16) {  // header_bytes, bounded: the rest of a long header
      const uint32_t hb = GetLe32(buf.data() + 12);
      if (hb > n && hb <= (1u << 20) && hb <= size - off) {
        buf.resize(hb);
        KVTIER_ASSIGN_OR_RETURN(const size_t m, file.Read(off + n, hb - n, buf.data() + n));
        buf.resize(n + m);
      }
    }
    Result<BlockFileHeader> h = DecodeRecordHeader(buf, size - off, rname);
    if (!h.ok()) {
      if (h.status().code() == StatusCode::kUnimplemented) return Bad(rname, h.status().message());
      return h.status();
    }
    const uint64_t len = h->file_bytes();
    idx.records.push_back({off, std::move(*h)});
    off = AlignRecord(off + len);
  }
  if (off != size) {
    return Bad(name, "records end at byte " + std::to_string(off) + ", the file has " +
                         std::to_string(size));
  }
  return idx;
}

}  // namespace kvtier::tier
