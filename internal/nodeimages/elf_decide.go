package nodeimages

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// elfArch maps an ELF machine to the OCI platform architecture.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
}

// staticELFArch decides whether data can be an image's only program: a
// Linux ELF executable with no program interpreter (the images have no
// libc or dynamic loader: a dynamically linked binary would fail in the
// pod with a bare "no such file or directory"). It returns the OCI
// architecture of the image.
func staticELFArch(data []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable (%v): run `make tools`, which builds it for linux", err)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("ELF file of type %v, not an executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked (it has a program interpreter): an image without a libc cannot run it; `make tools` builds it with CGO_ENABLED=0")
		}
	}
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("ELF machine %v: images are built for amd64 and arm64 only", f.Machine)
	}
	return arch, nil
}
