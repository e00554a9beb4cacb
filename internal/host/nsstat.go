package host

import "golang.org/x/sys/unix"

type fileInfo struct{ ino uint32 }

func (f *fileInfo) stat(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	f.ino = uint32(st.Ino)
	return nil
}
