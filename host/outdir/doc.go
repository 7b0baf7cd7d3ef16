// Package outdir writes the files a run delivers (its whole /tmp/output,
// streamed from the guest) onto the host, into a new directory named for
// the run under a folder the user chose: `pybox run --out DIR` and
// `pybox mcp --output-dir DIR`. It also keeps that folder within its
// bound, earlier runs included, when several servers share it.
//
// # A run's directory
//
// The names are the program's, so they are held to the rules a careful
// user would set: a plain file name, nothing that needs escaping, never
// outside the run's directory (it is written through an os.Root), never
// over a file that exists (the directory is new, every file is created
// with O_EXCL, and given its name by a link, which replaces nothing),
// names that start with a dot only when asked for, and a bound on what
// one run writes. A file is kept only if it came whole and matches the
// sha256 the receipt gives it: until then it is written under a
// temporary name, and only a file that is whole, checked and on disk is
// given its own name, so that no program or person sees part of a file,
// or a file the receipt disowns, under a name it could take for the
// result.
//
// # What a folder costs
//
// Both bounds, the run's and the folder's, count the disk, not the data
// (cost.go): a file costs its allocated blocks (st_blocks*512, what du
// counts) and [EntryCost] for its inode and directory entry, which du
// does not show, so that a run of a thousand empty files costs 4 MiB
// rather than nothing; a directory costs its blocks (du counts them) and
// [EntryCost]. While a run writes, its directory predicts the same
// measure: each file's bytes rounded up to [BlockSize], and [EntryCost]
// for it and for the directory with one block. A directory's blocks grow
// with its names beyond that prediction (36 KiB for a thousand short
// ones on ext4); the measure at the run's end records them, so a folder
// may pass its bound by that much. A folder holds at most
// [DefaultMaxEntries] entries, whatever their cost.
//
// # The ledger
//
// A folder with a bound keeps a ledger, DIR/.pybox-ledger (a name no run
// gets: run IDs never start with a dot), a small JSON document:
//
//	{"version":1,
//	 "folder":{"dev":..,"ino":..,"nlink":..,"mtime_ns":..,"ctime_ns":..},
//	 "bytes":N, "entries":M,
//	 "reserved":[{"run":"mcp-..","host":"..","pid":..,"until":..,"cost":..,"entries":..}]}
//
// bytes and entries are what the folder holds as du counts it, leaving
// out the directories of runs in progress, and the ledger itself, whose
// blocks change as it is written (it is counted as it is when read).
// reserved are the runs in progress, each with the room it may fill. The
// ledger is the folder's lock too: every reader and writer holds
// flock(2) on it (LOCK_EX), so servers of several agents, and
// `pybox run --out`, take their turns.
//
// Admission (Folder.Admit) is: lock; read the ledger; measure the folder
// (one walk) only if the ledger cannot be trusted; refuse if what is held
// and reserved leaves no room; else make the run's directory, reserve
// min(the run's own bound, what is left), write, unlock. The run's end
// (Dir.Finish or Dir.Abort) is: lock; measure the run's directory alone
// (at most 1,025 entries), put that in place of the reservation, write,
// unlock. A call that runs therefore costs the same whatever the folder's
// history holds; one that is refused costs a walk (see below).
//
// # When the ledger is not trusted
//
// The ledger records the folder's own stat (device, inode, link count,
// mtime and ctime, to the nanosecond) as it was when PyBox last changed
// the folder, always under the lock. Anything else that adds, removes or
// renames an entry in the folder, as a user deleting earlier runs to make
// room does, changes its mtime and ctime: the ledger no longer matches
// and the next admission walks the folder. A ledger that is missing,
// torn, of another version or not PyBox's is not trusted either.
//
// Changes deeper down (files deleted, or added, by hand inside a run's
// directory) leave the folder's stat alone, and the ledger does not see
// them until the folder is walked again. So before it refuses a call,
// admission always walks the folder once more: a folder is never called
// full on the ledger's word alone, and room made by hand at any depth is
// found then.
//
// # Reservations whose owner is gone
//
// A reservation names its owner: host name, process ID and an expiry
// (ten minutes, far beyond the longest run). A reservation on this host
// whose process is gone (kill(pid, 0) says ESRCH), or one past its
// expiry, is dead: the next to take the lock measures the directory it
// was for, counts that as held, and drops it. An owner that comes back
// to a reservation no longer there marks the ledger stale, so the next
// admission walks.
//
// `pybox run --out` has no bound of its own: in a folder that keeps a
// ledger it takes the lock and records its run like a server does, so
// the servers' ledger stays right; in any other folder it writes as
// before and makes no file of PyBox's there.
package outdir
