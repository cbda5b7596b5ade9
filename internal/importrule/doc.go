// Package importrule holds the test that enforces the house plan's import
// rule (docs/architecture.md): which project packages each package,
// internal ones included, may import, which packages only tests may
// import, and what the pure core must never touch.
package importrule
