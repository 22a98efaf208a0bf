package vpc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/klog/v2"
)

// Down removes what the record at stateFile says was made, newest first,
// each only while its name still names what was made (a netns's inode, a
// link's ifindex): never by a name pattern, never what someone else made
// since. Objects already gone are fine. No record: nothing to do.
func Down(ctx context.Context, stateFile string) error {
	rec, err := loadRecord(stateFile)
	if err != nil {
		return err
	}
	if len(rec.Objects) == 0 {
		return rec.remove()
	}
	logger := klog.FromContext(ctx)
	var errs []error
	for i := len(rec.Objects) - 1; i >= 0; i-- {
		o := rec.Objects[i]
		if err := removeObject(o); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.V(2).Info("Removed", "kind", o.Kind, "name", o.Name, "netns", o.Netns)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return rec.remove()
}

func removeObject(o object) error {
	switch o.Kind {
	case "route":
		args := append([]string{"route", "del"}, o.Route...)
		if o.Netns != "" {
			if _, err := netnsInode(o.Netns); err != nil {
				return nil // the namespace, and its routes, are gone
			}
			args = append([]string{"-n", o.Netns}, args...)
		}
		return absentOK(ip(args...))
	case "link":
		if o.Netns != "" {
			return absentOK(ip("-n", o.Netns, "link", "del", o.Name))
		}
		idx, err := linkIndex(o.Name)
		if err != nil {
			return nil // gone
		}
		if o.Ident != 0 && idx != o.Ident {
			return fmt.Errorf("link %s is not the one this VPC made (ifindex %d, made %d): left alone", o.Name, idx, o.Ident)
		}
		return absentOK(ip("link", "del", o.Name))
	case "netns":
		ino, err := netnsInode(o.Name)
		if err != nil {
			return nil // gone
		}
		if o.Ident != 0 && ino != o.Ident {
			return fmt.Errorf("network namespace %s is not the one this VPC made (inode %d, made %d): left alone", o.Name, ino, o.Ident)
		}
		return absentOK(ip("netns", "del", o.Name))
	}
	return fmt.Errorf("unknown recorded object kind %q", o.Kind)
}

// absentOK treats "it is not there" as done.
func absentOK(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []string{"No such process", "Cannot find device", "No such device", "No such file or directory", "does not exist", "not found"} {
		if strings.Contains(err.Error(), s) {
			return nil
		}
	}
	return err
}
