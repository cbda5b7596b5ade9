// Package timing is Arrow's timing model (arXiv:2505.11916 §3.1): how long
// an instance takes to prefill a prompt and to run one decode iteration,
// the largest decode batch that meets a TPOT SLO, the cost of moving KV
// between instances, and least-squares fitting of the curves from samples.
//
// Start with Profile in profile.go; Link in kv.go prices KV transfers.
package timing
