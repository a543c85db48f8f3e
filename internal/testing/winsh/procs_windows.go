package winsh

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Running returns those of pids that still run as sh.exe, read from a
// toolhelp snapshot of every process: the check does not go through the
// job objects of the code under test. The image name guards against a PID
// Windows already gave to another process.
func Running(pids []int) ([]int, error) {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPPROCESS, 0)
	if err != nil {
		return nil, fmt.Errorf("winsh: snapshot processes: %w", err)
	}
	defer windows.CloseHandle(snap)
	var e windows.ProcessEntry32
	e.Size = uint32(unsafe.Sizeof(e))
	var alive []int
	for err = windows.Process32First(snap, &e); err == nil; err = windows.Process32Next(snap, &e) {
		name := strings.ToLower(windows.UTF16ToString(e.ExeFile[:]))
		if name == "sh.exe" && slices.Contains(pids, int(e.ProcessID)) {
			alive = append(alive, int(e.ProcessID))
		}
	}
	if err != windows.ERROR_NO_MORE_FILES {
		return nil, fmt.Errorf("winsh: walk the process snapshot: %w", err)
	}
	return alive, nil
}
