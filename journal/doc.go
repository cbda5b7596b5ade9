// Package journal is the durable record of a run: an append-only store of
// its event.Records, one directory per run, and the Parquet export that
// turns a directory of runs into tables for analysis.
//
// # Where to start
//
// Writing: Create makes a run directory and returns a Writer, an
// event.Recorder; hand it to a driver (the simulator, the live router) and
// Close it at the end of the run, or ClosePartial(reason) when the run
// stopped early (an interrupt, Ctrl-C on a live router). Reading: Open
// returns a Reader for a whole run (OpenWith with OpenOptions.Partial
// accepts runs that are not whole); Replay walks every record in Seq order
// and checks them against the end-of-run record, and Fold, RoleMoves,
// Decisions and Faults (tables.go) turn them into Go slices. Export
// (export.go) writes the Parquet tables described in docs/parquet.md and
// their manifest; ReadExport reads them back after checking the manifest.
// The byte layout lives in codec.go, the end-of-run record and the typed
// errors (IncompleteError, CorruptError) in end.go, the directory layout
// and Pebble settings in store.go.
//
// # The end-of-run record
//
// Close and ClosePartial store End (the record count with the metadata,
// the last Seq, a CRC-32C of every record's key, value length and value,
// and the partial reason, if any) under a key above every record key. A
// run without it never closed. Open refuses a run without it, or marked
// partial, with an *IncompleteError naming the directory, what is missing
// and the last Seq in the store; Replay, at the end of the store, compares
// the count, last Seq and checksum and returns a *CorruptError on any
// difference, so a lost, added or altered record (or a damaged file) is an
// error, never a smaller run.
//
// # Directory layout
//
// A run directory holds a marker file, JOURNAL, and a Pebble store,
// events/. Create writes the marker last, after the run-metadata record is
// synced, so a directory with a marker always has its metadata. IsJournal
// checks the layout; Runs lists run directories under a root.
//
// # Keys and values
//
// A key is the record's Seq as 8 big-endian bytes, so Pebble's byte order
// is Seq order. Seq 0 is the run-metadata record (Kind event.KindRunMeta,
// Text = event.RunMeta as JSON, Schema = event.SchemaVersion); a driver's
// records follow from Seq 1, either stamped by the driver (strictly
// increasing) or assigned by the Writer when Seq is 0.
//
// A value is the record without its Seq: a format-version byte (1), the
// Kind byte, a uvarint of presence flags, At as a zig-zag varint, then
// only the fields whose flag is set, in a fixed order: Cause, From and To
// as bytes; Inst, Peer, Req, Tokens, Want, Ref as zig-zag varints; Class
// and Text as uvarint-length-prefixed bytes. Absent fields read back as
// zero (Inst and Peer as event.NoInstance). A request record takes 12 to
// 16 bytes (an arrival, with its class, about 28). Decoding checks every
// length and refuses unknown format versions, unknown flags and trailing
// bytes with an error naming the key; it never panics. A journal whose
// metadata names a newer schema than event.SchemaVersion is refused by
// Open.
//
// # Durability and the sync policy
//
// Records are buffered in a Pebble batch and committed every
// Options.BatchRecords records (4096 by default), at Flush and at Close.
// Pebble writes each commit to its write-ahead log as one checksummed
// unit, so after a crash Open sees each batch whole or not at all: never a
// torn record, and Seqs without gaps up to the last surviving batch.
//
// Commits, and their fsyncs, run on the writer's own committer goroutine,
// one at a time in the order the batches were filled: Record only copies
// the record into the batch being filled and, when that batch is full,
// hands it over and starts another, so the goroutine that records (the
// live router's, which places every request) does not wait for the disk.
// It waits only as back-pressure, when the disk falls behind: a full batch
// finds another already queued behind the one being committed, and waits
// for the committer to take it (so the writer holds at most three
// batches). Flush and Close hand over the batch being filled and wait for
// the committer. Errors from a commit or from Pebble's background work
// become the writer's sticky error, which Record, Flush, Err and Close
// report from then on; the committer commits nothing after it.
//
// A record is acknowledged once a synced commit that covers it has
// returned; Writer.Acked reports the highest acknowledged Seq under either
// policy. SyncEveryBatch (the default) fsyncs every commit, so Acked
// advances as each batch's commit returns, shortly after Record handed the
// batch over; such records survive a killed process and a power loss.
// SyncOnClose commits automatic batches without fsync and syncs at Flush
// and Close only: appending costs less, but only records covered by a
// returned Flush or Close are acknowledged, since Pebble may still hold
// later no-sync commits in process memory when the process dies. Under
// both, once Flush returns nil every record given before it is
// acknowledged. On a disk with fast fsync the two policies cost about the
// same per record (the fsync is amortised over a batch); on a slow disk
// SyncOnClose spares the disk one fsync per batch.
//
// # Pebble
//
// The store is opened with a quiet logger (Pebble's default writes to
// stderr and exits the process on fatal errors; here a fatal error becomes
// the Writer's sticky error), an event listener whose BackgroundError
// (failed flushes and compactions) becomes the Writer's sticky error too,
// uncompressed 32 KiB blocks and 32 MiB memtables. Close flushes the
// memtable into tables and deletes the write-ahead logs (the active one is
// preallocated at 110% of the memtable size), so a finished run takes its
// data plus a few kilobytes. Readers open it read-only, which replays any
// write-ahead log into memory without changing any file, so a crashed
// journal can be read as often as wanted.
package journal
