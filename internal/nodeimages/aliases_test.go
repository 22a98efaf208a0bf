package nodeimages

import (
	"slices"
	"strings"
	"testing"
)

func TestParseAliases(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Alias
		wantErr  string
	}{
		{name: "empty"},
		{name: "comments and blank lines", in: "# x\n\n  # y\n"},
		{name: "two", in: "# v1.35.4\nregistry.k8s.io/pause:3.10.2 registry.k8s.io/pause:3.10.1\n x.io/b:1  x.io/b:2 \n",
			want: []Alias{{"registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.1"}, {"x.io/b:1", "x.io/b:2"}}},
		{name: "one field", in: "registry.k8s.io/pause:3.10.2\n", wantErr: "line 1"},
		{name: "three fields", in: "\na:1 b:2 c:3\n", wantErr: "line 2"},
		{name: "no tag", in: "registry.k8s.io/pause registry.k8s.io/pause:3.10.1\n", wantErr: "no image reference with a tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAliases([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestWithAliases(t *testing.T) {
	built := []Image{{Name: PauseImage}, {Name: AgnhostImage}}
	for _, tc := range []struct {
		name    string
		aliases []Alias
		want    []string
		wantErr string
	}{
		{name: "none", want: []string{PauseImage, AgnhostImage}},
		{name: "older tags", aliases: []Alias{{PauseImage, "registry.k8s.io/pause:3.10.1"}, {AgnhostImage, "registry.k8s.io/e2e-test-images/agnhost:2.59"}},
			want: []string{PauseImage, AgnhostImage, "registry.k8s.io/pause:3.10.1", "registry.k8s.io/e2e-test-images/agnhost:2.59"}},
		{name: "alias equal to the name (the same release's tag)", aliases: []Alias{{PauseImage, PauseImage}}, want: []string{PauseImage, AgnhostImage}},
		{name: "repeated alias", aliases: []Alias{{PauseImage, "x/p:1"}, {PauseImage, "x/p:1"}}, want: []string{PauseImage, AgnhostImage, "x/p:1"}},
		{name: "alias of an image not built", aliases: []Alias{{"registry.k8s.io/nginx:1", "x/n:1"}}, wantErr: "not an image portside builds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withAliases(built, tc.aliases)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			var names []string
			for _, i := range got {
				names = append(names, i.Name)
			}
			if err != nil || !slices.Equal(names, tc.want) {
				t.Fatalf("got %v, %v; want %v", names, err, tc.want)
			}
		})
	}
}
