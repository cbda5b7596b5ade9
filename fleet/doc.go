// Package fleet reads fleet specifications: the instances with their timing
// profiles, the SLOs, KV transfer, batching and drain settings. The
// simulator and the live router both start from a Spec. Start with Spec in
// fleet.go; built-in fleets are embedded from this directory's *.yaml.
package fleet
