// Package docscheck holds the tests that check README.md and docs/ against
// the built binaries: every flag the documentation names exists, and every
// flag the binaries have is documented in the README.
package docscheck
