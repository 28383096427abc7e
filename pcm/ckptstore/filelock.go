package ckptstore

// FileLock is an exclusive lock on a file, taken by TryLock. Its holder owns whatever the
// file stands for (pcmd: its memory store) for as long as it lives.
type FileLock struct{ fd int }
