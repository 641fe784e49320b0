// Package editdist measures how far apart two names are, for the "did you mean" hints of the
// jobwire command (mistyped commands and flags) and of the config file (mistyped keys).
package editdist

// Distance is the Levenshtein distance between a and b, byte by byte, counting a swap of two
// adjacent bytes ("sattus" for "status") as one edit: the optimal string alignment distance.
func Distance(a, b string) int {
	// prev2, prev and cur are three rows of the distance matrix.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
