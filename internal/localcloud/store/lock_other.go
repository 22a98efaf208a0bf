//go:build !unix

package store

func lockedElsewhere(string) bool { return false }
