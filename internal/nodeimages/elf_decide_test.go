package nodeimages

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"
)

// fakeELF is a minimal ELF64 executable of machine m with the given
// program headers: enough for debug/elf, without compiling anything.
func fakeELF(t testing.TB, typ elf.Type, m elf.Machine, progs ...elf.ProgType) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := elf.Header64{
		Type: uint16(typ), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: uint16(len(progs)), Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if err := binary.Write(&buf, binary.LittleEndian, elf.Prog64{Type: uint32(p)}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestStaticELFArch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    []byte
		want    string
		wantErr string
	}{
		{"static amd64", fakeELF(t, elf.ET_EXEC, elf.EM_X86_64, elf.PT_LOAD), "amd64", ""},
		{"static arm64", fakeELF(t, elf.ET_EXEC, elf.EM_AARCH64, elf.PT_LOAD), "arm64", ""},
		{"static PIE", fakeELF(t, elf.ET_DYN, elf.EM_X86_64, elf.PT_LOAD), "amd64", ""},
		{"dynamic", fakeELF(t, elf.ET_EXEC, elf.EM_X86_64, elf.PT_INTERP, elf.PT_LOAD), "", "dynamically linked"},
		{"object file", fakeELF(t, elf.ET_REL, elf.EM_X86_64), "", "not an executable"},
		{"other machine", fakeELF(t, elf.ET_EXEC, elf.EM_RISCV, elf.PT_LOAD), "", "amd64 and arm64 only"},
		{"a script", []byte("#!/bin/sh\necho hi\n"), "", "not an ELF executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := staticELFArch(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
