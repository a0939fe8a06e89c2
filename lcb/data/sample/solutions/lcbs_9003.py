class Solution:
    def shortenLabel(self, s: str) -> str:
        out = []
        start = 0
        for i in range(1, len(s) + 1):
            if i == len(s) or s[i] != s[start]:
                size = i - start
                out.append(s[start] + (str(size) if size > 1 else ""))
                start = i
        return "".join(out)
