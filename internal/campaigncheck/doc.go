// Package campaigncheck holds tests of the campaign scripts under
// campaigns/ that are written in Python: each runs a script on small
// files it writes and checks what the script prints.
package campaigncheck
