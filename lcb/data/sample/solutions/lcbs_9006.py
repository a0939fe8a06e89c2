class Solution:
    def minChanges(self, s: str, k: int) -> int:
        n = len(s)
        # cost[i][j]: changes that make s[i..j] a palindrome, grown from the middle outwards.
        cost = [[0] * n for _ in range(n)]
        for length in range(2, n + 1):
            for i in range(n - length + 1):
                j = i + length - 1
                inner = cost[i + 1][j - 1] if length > 2 else 0
                cost[i][j] = inner + (s[i] != s[j])
        infinity = float("inf")
        # dp[p][j]: best total for the prefix of length j split into p pieces.
        dp = [[infinity] * (n + 1) for _ in range(k + 1)]
        dp[0][0] = 0
        for p in range(1, k + 1):
            for j in range(p, n + 1):
                dp[p][j] = min(dp[p - 1][i] + cost[i][j - 1] for i in range(p - 1, j))
        return int(dp[k][n])
