// The SSD tier's segment file (docs/formats/kv-segment-file.md, format version 3): one file
// holding the blocks a writer published together, each as a record that is byte for byte a
// block file image (its own header, rows and CRCs), so every block is verified on
// its own. Pure functions over bytes and files; thread-safe for distinct files (a
// RandomAccessFile is used by one thread at a time, as Env says).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/status.h"
#include "tier/block_file.h"

namespace kvtier::tier {

// 3: the records are version-2 block file images (flags); version-2 segments (version-1
// records) are still read.
inline constexpr uint32_t kSegmentFileVersion = 3;
inline constexpr uint32_t kSegmentHeaderBytes = 40;
inline constexpr uint64_t kRecordAlign = 8;  // every record starts on a multiple of 8

inline uint64_t AlignRecord(uint64_t n) { return (n + kRecordAlign - 1) / kRecordAlign * kRecordAlign; }

// The fixed header: magic, version, header_bytes, segment id, record count, header CRC.
void EncodeSegmentHeader(uint64_t segment_id, uint32_t n_records,
                         uint8_t out[kSegmentHeaderBytes]);

struct SegmentHeader {
  uint64_t segment_id = 0;
  uint32_t n_records = 0;
};
// Corruption naming the field; Unimplemented for a newer version.
Result<SegmentHeader> DecodeSegmentHeader(std::span<const uint8_t> bytes, const std::string& name);

// One record of a segment: where it starts, its bytes (== header.file_bytes()), its header.
struct SegmentRecord {
  uint64_t offset = 0;
  BlockFileHeader header;
};

struct SegmentIndex {
  SegmentHeader header;
  std::vector<SegmentRecord> records;
};

// Walks a segment file's records by their headers only (one read of up to 4 KiB per record,
// none of the rows): the segment header, then each record's header at the offset the previous
// one ends on (rounded up to kRecordAlign), n_records of them, ending exactly at the file's
// end. Any inconsistency is Corruption (the segment is not trusted as a whole); a failed
// read is the Env's error.
Result<SegmentIndex> ReadSegmentIndex(const RandomAccessFile& file, const std::string& name);

// "<16 hex digits>": a segment id as file names spell it.
std::string SegmentName(uint64_t segment_id);

}  // namespace kvtier::tier
